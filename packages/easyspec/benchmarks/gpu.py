"""GPU measurements: one fuzzy draft token, ``stacked`` and ``streams`` vs ``sequential``.

Llama-3.2-1B-shaped draft (16 layers, d = 2048, 32/8 heads, bf16, batch 1, random weights),
contexts 1k and 4k, N = 4. Correctness first (each backend vs ``sequential``), then timings
(``bench.compare``, CUDA events). ``--toy`` runs a tiny fp32 model on CPU (no ``streams``).

    python packages/easyspec/benchmarks/gpu.py --out gpu.json
    python packages/easyspec/benchmarks/gpu.py --toy --out toy.json
"""

from __future__ import annotations

import argparse
import json

import torch
from easyspec import FuzzyDraft

from neurips25_core.bench import compare
from neurips25_core.models import tiny_llama, tiny_llama_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--toy", action="store_true")
    ap.add_argument("--out", default="easyspec-gpu.json")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.toy
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.toy:
        shape, contexts, tol = (
            dict(hidden_size=64, num_layers=6, num_heads=4, num_kv_heads=2),
            [32],
            1e-5,
        )
    else:
        shape = dict(
            hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8, intermediate_size=8192
        )
        contexts, tol = [1024, 4096], 1.6e-2
    backends = ["sequential", "stacked"] + (["streams"] if cuda else [])
    result = {"device": device, "dtype": str(dtype), "correctness": [], "speed": []}
    for ctx_len in contexts:
        cfg = tiny_llama_config(
            max_position_embeddings=ctx_len + 16, vocab_size=256 if args.toy else 128256, **shape
        )
        model = tiny_llama(cfg, seed=0).to(device=device, dtype=dtype).eval()
        prefix = torch.randint(0, cfg.vocab_size, (1, ctx_len), device=device)
        drafts = {b: FuzzyDraft(model, group_size=4, backend=b) for b in backends}
        drafts["exact (N=1)"] = FuzzyDraft(model, group_size=1)
        fns = {}
        for name, d in drafts.items():
            d.prefill(prefix)
            n = d.length

            def one(d=d, n=n):
                d.truncate(n)
                return d.step(1)

            fns[name] = one
        ref = fns["sequential"]().float()
        for name in backends[1:]:
            err = ((fns[name]().float() - ref).norm() / ref.norm()).item()
            result["correctness"].append(
                {"backend": name, "context": ctx_len, "rel_err": err, "ok": err <= tol}
            )
        cmp = compare(fns, baseline="sequential", min_time=0.05 if args.toy else 1.0)
        for name, t in cmp.timings.items():
            result["speed"].append(
                {
                    "backend": name,
                    "context": ctx_len,
                    "median_ms": 1e3 * t.median,
                    "speedup_vs_sequential": cmp.ratios.get(name, 1.0),
                }
            )
        print(cmp)
        del drafts, model
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["correctness"]))


if __name__ == "__main__":
    main()
