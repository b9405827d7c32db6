"""Seed spread of the quick quality comparison: SinkGD(+AdamW) vs AdamW on the quick model, several seeds.

The suite's ``--quick`` quality case runs one seed; this script repeats exactly that configuration
(0.13M-parameter Llama, 80 steps of 16×64 bytes, SinkGD η = 1e-3 with AdamW 3e-3 on
embeddings/head/norms, AdamW at 1e-3 and 3e-3) over several seeds, and writes the per-seed
validation losses and tokens-to-target ratios as JSON and markdown::

    uv run python packages/sinkgd/benchmarks/quality_seeds.py --seeds 0 1 2 \
        --out packages/sinkgd/results/quality_seeds
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from sinkgd.bench import QUICK_ADAMW_LRS, tokens_to_target, train_one

from neurips25_core.bench import environment


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument(
        "--out", type=Path, required=True, help="output prefix (.json and .md are added)"
    )
    parser.add_argument(
        "--config",
        choices=("quick", "spec"),
        default="quick",
        help="quick: the suite's --quick model (16×64 bytes per step); spec: the spec's 0.86M model (16×128)",
    )
    parser.add_argument("--adamw-lrs", type=float, nargs="+", default=list(QUICK_ADAMW_LRS))
    args = parser.parse_args(argv)
    quick = args.config == "quick"
    seq_len, evals = (64, 8) if quick else (128, 10)
    rows = []
    for seed in args.seeds:
        sink = train_one("sinkgd", 1e-3, seed, args.steps, quick, 16, seq_len, evals)
        adams = [
            train_one("adamw", lr, seed, args.steps, quick, 16, seq_len, evals)
            for lr in args.adamw_lrs
        ]
        best = min(adams, key=lambda r: r["val_loss"])
        target = best["curve"][-1][1]
        reached = tokens_to_target(sink["curve"], target)
        rows.append(
            {
                "seed": seed,
                "sinkgd_val_loss": sink["val_loss"],
                **{f"adamw_{r['lr']:g}_val_loss": r["val_loss"] for r in adams},
                "best_adamw_lr": best["lr"],
                "tokens_to_adamw_loss": reached / best["tokens"]
                if reached is not None
                else float("nan"),
                "runs": [sink, *adams],
            }
        )
    ratios = [r["tokens_to_adamw_loss"] for r in rows]
    summary = {
        "environment": environment(),
        "steps": args.steps,
        "config": args.config,
        "seeds": args.seeds,
        "sinkgd_val_loss_mean": statistics.mean(r["sinkgd_val_loss"] for r in rows),
        "best_adamw_val_loss_mean": statistics.mean(
            min(v for k, v in r.items() if k.startswith("adamw_")) for r in rows
        ),
        "tokens_to_adamw_loss_mean": statistics.mean(ratios)
        if all(math.isfinite(x) for x in ratios)
        else float("nan"),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    keys = [k for k in rows[0] if k != "runs"]
    lines = [
        f"Measured {summary['environment']['date']} on {summary['environment']['machine']}, "
        f"commit {summary['environment']['git_commit']}; config {args.config}, {args.steps} steps × {16 * seq_len:,} tokens.\n",
        "| " + " | ".join(keys) + " |",
        "|" + "---|" * len(keys),
    ]
    for r in rows:
        lines.append(
            "| "
            + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys)
            + " |"
        )
    lines.append(
        f"\nmean SinkGD val loss {summary['sinkgd_val_loss_mean']:.4f}, mean best-AdamW val loss "
        f"{summary['best_adamw_val_loss_mean']:.4f}, mean tokens-to-AdamW-loss {summary['tokens_to_adamw_loss_mean']:.3f}"
    )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


if __name__ == "__main__":
    main()
