"""Width coordinate check (the issue's "widths 32-256 within 2x"), averaged over seeds.

Usage: ``uv run python packages/completep/benchmarks/width_coord_check.py LR STEPS SEEDS KINDS CLIP``,
e.g. ``1e-2 10 5 sp,mup,completep 1.0`` (the official width check's HPs: lr 1e-2, wd 0.1,
betas (0.9, 0.95), clip 1, 10 steps; here widths 32-256, base width 32, depth 2 = base depth,
head_dim 16, batch 8 x 64 tokens of the stdlib corpus). Prints, per kind, each site's mean |x|
(averaged over seeds) at step 1 and at the last step for each width, and max/min over widths.
"""

import statistics
import sys

import torch
from completep import ParamConfig, param_groups, parameterize, scaled_config
from completep.diagnostics import coord_check
from transformers import LlamaForCausalLM

from neurips25_core.bench import single_thread
from neurips25_core.data import stdlib_corpus
from neurips25_core.models import tiny_llama_config

SITES = ["embedding", "attn.0", "mlp.0", "attn.1", "mlp.1", "last_block", "logits"]


def main(argv: list[str]) -> None:
    lr, steps, nseeds = float(argv[0]), int(argv[1]), int(argv[2])
    kinds = argv[3].split(",")
    clip = None if argv[4] == "none" else float(argv[4])
    widths = [32, 64, 128, 256]
    corpus = stdlib_corpus()
    base = tiny_llama_config(
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    with single_thread():
        for kind in kinds:
            cfg = ParamConfig(kind=kind, base_width=32, base_depth=2)
            acc: dict = {}
            for seed in range(nseeds):
                gen = torch.Generator().manual_seed(100 + seed)
                batches = [corpus.get_batch("train", 8, 64, generator=gen) for _ in range(steps)]

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
                        param_groups(m, cfg, lr=lr, weight_decay=0.1, eps=1e-12),
                        betas=(0.9, 0.95),
                    ),
                    steps=steps,
                    grad_clip=clip,
                )
                for r in records:
                    acc.setdefault((r["site"], r["step"], r["size"]), []).append(r["value"])
            for step in (1, steps):
                print(kind, "step", step)
                for site in SITES:
                    vals = [statistics.mean(acc[(site, step, w)]) for w in widths]
                    line = " ".join(f"{v:.4g}" for v in vals)
                    print(f"  {site:10s} {line} max/min {max(vals) / min(vals):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
