"""Width coordinate check (the issue's "widths 32-256 within 2x"), averaged over seeds.

Usage::

    uv run python packages/completep/benchmarks/width_coord_check.py \
        --lr 1e-2 --steps 10 --seeds 5 --kinds sp,mup --widths 32,64,128,256 --out w.json

Defaults are the official width check's HPs (EleutherAI/nanoGPT-mup, `mup_examples/
coord_check_shakespeare_char/mup/run.sh`: lr 1e-2 constant, wd 0.1, betas (0.9, 0.95), clip 1,
10 steps, fp32); here base width 32, depth 2 = base depth, head_dim 16, ``--batch`` x 64 tokens of
the stdlib corpus per step. The coordinate is ``output.abs().mean()`` over batch, sequence and
hidden axes, as in the official ``train.py`` hooks and microsoft/mup's ``'l1'``. Prints, per kind,
each site's value (mean over seeds) at step 1 and at the last step for each width, and max/min over
widths, both per layer (``attn.0``, ...) and averaged over layers (``attn``, ``mlp``: the official
check appends every layer's attention output to one list and logs its mean).
"""

import argparse
import json
import statistics

import torch
from completep import ParamConfig, param_groups, parameterize, scaled_config
from completep.diagnostics import coord_check
from transformers import LlamaForCausalLM

from neurips25_core.bench import single_thread
from neurips25_core.data import stdlib_corpus
from neurips25_core.models import tiny_llama_config

SITES = ["embedding", "attn.0", "mlp.0", "attn.1", "mlp.1", "attn", "mlp", "last_block", "logits"]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--kinds", default="sp,mup")
    ap.add_argument("--widths", default="32,64,128,256")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--clip", default="1.0", help="global-norm clip, or 'none'")
    ap.add_argument("--out", default=None, help="write the per-seed values as JSON")
    args = ap.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    clip = None if args.clip == "none" else float(args.clip)
    corpus = stdlib_corpus()
    base = tiny_llama_config(
        hidden_size=32, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=64
    )
    out: dict = {"args": vars(args), "values": {}, "max_over_min": {}}
    with single_thread():
        for kind in args.kinds.split(","):
            cfg = ParamConfig(kind=kind, base_width=32, base_depth=2)
            acc: dict = {}
            for seed in range(args.seeds):
                gen = torch.Generator().manual_seed(100 + seed)
                batches = [
                    corpus.get_batch("train", args.batch, 64, generator=gen)
                    for _ in range(args.steps)
                ]

                def make(width, seed=seed, cfg=cfg):
                    torch.manual_seed(seed)
                    model = LlamaForCausalLM(scaled_config(base, width, 2))
                    parameterize(model, cfg, generator=torch.Generator().manual_seed(seed))
                    return model

                records = coord_check(
                    make,
                    widths,
                    lambda s, batches=batches: batches[s],
                    lambda m, cfg=cfg: torch.optim.AdamW(
                        param_groups(m, cfg, lr=args.lr, weight_decay=0.1, eps=1e-12),
                        betas=(0.9, 0.95),
                    ),
                    steps=args.steps,
                    grad_clip=clip,
                )
                per: dict = {}
                for r in records:
                    per[(r["site"], r["step"], r["size"])] = r["value"]
                for site, step, size in list(per):
                    if site.startswith(("attn.", "mlp.")):
                        kind_site = site.split(".")[0]
                        layers = [per[(f"{kind_site}.{i}", step, size)] for i in range(2)]
                        per[(kind_site, step, size)] = statistics.fmean(layers)
                for key, v in per.items():
                    acc.setdefault(key, []).append(v)
            for step in (1, args.steps):
                print(kind, "step", step, "widths", widths)
                for site in SITES:
                    vals = [statistics.fmean(acc[(site, step, w)]) for w in widths]
                    spread = [statistics.pstdev(acc[(site, step, w)]) for w in widths]
                    ratio = max(vals) / min(vals)
                    out["values"][f"{kind}/{site}/step{step}"] = {
                        "mean": vals,
                        "seed_std": spread,
                        "per_seed": [acc[(site, step, w)] for w in widths],
                    }
                    out["max_over_min"][f"{kind}/{site}/step{step}"] = ratio
                    line = " ".join(f"{v:.4g}±{s:.2g}" for v, s in zip(vals, spread, strict=True))
                    print(f"  {site:10s} {line} max/min {ratio:.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
