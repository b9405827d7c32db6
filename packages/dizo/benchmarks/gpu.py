"""GPU benchmark for dizo: Triton seeded perturbation correctness, then speed.

Run on a CUDA machine from the repository root::

    uv run python packages/dizo/benchmarks/gpu.py --out gpu-results.json

``--toy`` runs tiny sizes (through the Triton interpreter on CPU; the tests do this). Sections:

1. correctness: Triton ``perturb_`` equals ``x + scale * z`` with z extracted by perturbing
   zeros; +eps, -2eps, +eps restores fp32 to a few ulp; ``project_`` / ``displacement_norms``
   match torch;
2. perturbation GB/s: Triton ``perturb_`` vs ``torch.normal`` + ``add_`` (10^8 elements);
3. step time, peak memory and tokens/s for FO AdamW, MeZO (torch and Triton perturbation) and
   DiZO on random-weight OPT-1.3B and a ~1B Llama (batch 16, sequence 256).

Not yet run on a GPU: no numbers from it are quoted anywhere.
"""

# ruff: noqa: B023  (each closure is timed inside its own loop iteration)
from __future__ import annotations

import argparse
import json
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dizo import DiZO, DiZOConfig, MeZO, MeZOConfig, ops

from neurips25_core.bench import environment, peak_memory_cuda, time_fn
from neurips25_core.testing import relative_error


def correctness(device, n):
    x = [torch.randn(n, device=device), torch.randn(n // 3 + 1, device=device)]
    z = [torch.zeros_like(t) for t in x]
    ops.perturb_(z, 3, 1.0, backend="triton")
    y = [t.clone() for t in x]
    ops.perturb_(y, 3, 0.5, backend="triton")
    err = max(relative_error(a, b + 0.5 * c) for a, b, c in zip(y, x, z))
    r = [t.clone() for t in x]
    for s in (1e-3, -2e-3, 1e-3):
        ops.perturb_(r, 3, s, backend="triton")
    restore = max(float((a - b).abs().max()) for a, b in zip(r, x))
    a = [t + 0.1 for t in x]
    p1, p2 = [t.clone() for t in x], [t.clone() for t in x]
    ops.project_(p1, a, [1.1, 0.9], backend="triton")
    ops.project_(p2, a, [1.1, 0.9], backend="torch")
    perr = max(relative_error(u, v) for u, v in zip(p1, p2))
    nerr = relative_error(
        ops.displacement_norms(x, a, backend="triton"),
        ops.displacement_norms(x, a, backend="torch"),
    )
    return {
        "perturb_rel_err": err,
        "restore_max_abs": restore,
        "project_rel_err": perr,
        "norm_rel_err": nerr,
        "ok": err < 1e-5 and restore < 1e-5 and perr < 1e-5 and nerr < 1e-5,
    }


def bandwidth(device, n):
    x = torch.randn(n, device=device)
    out = {}
    for name, fn in {
        "triton_perturb": lambda: ops.perturb_([x], 1, 1e-3, backend="triton"),
        "torch_perturb": lambda: ops.perturb_([x], 1, 1e-3, backend="torch"),
        "normal_add": lambda: x.add_(torch.normal(0.0, 1.0, x.shape, device=device), alpha=1e-3),
    }.items():
        t = time_fn(fn, min_time=0.05 if n < 1e6 else 1.0).median
        out[name] = {"ms": t * 1e3, "GB_per_s": 2 * 4 * n / t / 1e9}
    return out


def models(device, toy):
    from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

    if toy:
        cfgs = {
            "opt_toy": OPTConfig(
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                ffn_dim=32,
                vocab_size=64,
                max_position_embeddings=64,
                word_embed_proj_dim=16,
            )
        }
        batch, seq = 2, 8
    else:
        cfgs = {
            "opt-1.3b": OPTConfig(
                hidden_size=2048,
                num_hidden_layers=24,
                num_attention_heads=32,
                ffn_dim=8192,
                vocab_size=50272,
            ),
            "llama-1b": LlamaConfig(
                hidden_size=2048,
                num_hidden_layers=16,
                num_attention_heads=32,
                num_key_value_heads=8,
                intermediate_size=8192,
                vocab_size=32000,
            ),
        }
        batch, seq = 16, 256
    rows = []
    for name, cfg in cfgs.items():
        cls = OPTForCausalLM if isinstance(cfg, OPTConfig) else LlamaForCausalLM
        for arm in ("fo_adamw", "mezo_torch", "mezo_triton", "dizo"):
            torch.manual_seed(0)
            model = cls(cfg).to(device)
            ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)

            def loss_fn(m, b):
                return m(input_ids=b, labels=b).loss

            if arm == "fo_adamw":
                opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

                def step():
                    opt.zero_grad(set_to_none=True)
                    loss_fn(model, ids).backward()
                    opt.step()
            else:
                backend = "torch" if arm == "mezo_torch" else "triton"
                if arm == "dizo":
                    opt = DiZO(model, DiZOConfig(lr=1e-6, interval=50), [ids], backend=backend)
                else:
                    opt = MeZO(model, MeZOConfig(lr=1e-6), backend=backend)

                def step():
                    opt.step(loss_fn, ids)

            t = time_fn(step, min_time=0.01 if toy else 3.0).median
            mem = peak_memory_cuda(step) if device == "cuda" else None
            rows.append(
                {
                    "model": name,
                    "arm": arm,
                    "step_s": t,
                    "tokens_per_s": batch * seq / t,
                    "peak_bytes": mem,
                }
            )
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--toy", action="store_true")
    ap.add_argument("--out", default="dizo-gpu.json")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    res = {"env": environment(), "correctness": correctness(device, 1000 if args.toy else 10**7)}
    print(res["correctness"])
    if not res["correctness"]["ok"]:
        raise SystemExit("correctness failed")
    res["bandwidth"] = bandwidth(device, 4097 if args.toy else 10**8)
    res["models"] = models(device, args.toy)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res["bandwidth"], indent=1))


if __name__ == "__main__":
    main()
