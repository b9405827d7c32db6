"""Experiment A on one GPU: LR transfer across depth, SP (baseline) vs CompleteP, bf16 autocast.

    python packages/completep/benchmarks/gpu.py --out /tmp/completep-gpu      # ≤ 5 min on one H200
    python packages/completep/benchmarks/gpu.py --toy --out /tmp/x            # seconds, CPU ok

Width 256 (= base), depths {2, 8, 32}, seq 256, batch 64, 400 steps, η ∈ 2^{-11,-9,-7,-5}; fp32
optimizer state (parameters stay fp32, bf16 only inside autocast). The first run is timed and
the step count is trimmed so the whole grid fits the budget; the trimmed count is recorded.
Not measured yet: no GPU was lent to this package's sessions.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toy", action="store_true", help="tiny sizes (tests, CPU)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args(argv)

    from completep import ParamConfig, param_groups, parameterize, scaled_config
    from completep.diagnostics import fit_optimal_lr, loglog_slope
    from transformers import LlamaForCausalLM

    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import causal_lm_loss, evaluate_bpb, tiny_llama_config, train

    device = "cuda" if torch.cuda.is_available() and not args.toy else "cpu"
    width, heads = (16, 2) if args.toy else (256, 4)
    depths = [1, 2] if args.toy else [2, 8, 32]
    seq, batch = (16, 2) if args.toy else (256, 64)
    steps = 3 if args.toy else 400
    log2_lrs = [-8, -6] if args.toy else [-11, -9, -7, -5]
    base = tiny_llama_config(
        hidden_size=width,
        num_layers=2,
        num_heads=heads,
        intermediate_size=4 * width,
        max_position_embeddings=seq,
    )
    corpus = stdlib_corpus()

    def loss_fn(model, x, y):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            return causal_lm_loss(model, x, y)

    runs = []
    total = 2 * len(depths) * len(log2_lrs)
    for kind in ("sp", "completep"):
        cfg = ParamConfig(kind=kind, base_width=width, base_depth=depths[0])
        for depth in depths:
            for log2_lr in log2_lrs:
                torch.manual_seed(0)
                model = LlamaForCausalLM(scaled_config(base, width, depth))
                parameterize(model, cfg, generator=torch.Generator().manual_seed(0))
                model.to(device)
                opt = torch.optim.AdamW(
                    param_groups(model, cfg, lr=2.0**log2_lr, eps=1e-12), betas=(0.9, 0.95)
                )
                start = time.perf_counter()
                try:
                    train(
                        model,
                        corpus,
                        steps=steps,
                        optimizer=opt,
                        batch_size=batch,
                        seq_len=seq,
                        loss_fn=loss_fn,
                        progress=False,
                    )
                    bpb = evaluate_bpb(
                        model,
                        corpus,
                        batch_size=batch,
                        seq_len=seq,
                        num_batches=4 if args.toy else 20,
                        loss_fn=loss_fn,
                    )
                except FloatingPointError:
                    bpb = float("inf")
                seconds = time.perf_counter() - start
                if not runs and not args.toy:
                    # the first run is the cheapest (shallowest); scale by depth to trim steps
                    per_step_layer = seconds / steps / depth
                    projected = per_step_layer * steps * sum(depths) * len(log2_lrs) * 2
                    if projected > args.budget_s:
                        steps = max(50, int(steps * args.budget_s / projected))
                runs.append(
                    {
                        "kind": kind,
                        "depth": depth,
                        "log2_lr": log2_lr,
                        "val_bpb": bpb,
                        "seconds": seconds,
                        "steps": steps,
                    }
                )
                print(
                    f"[{len(runs)}/{total}] {kind} L={depth} lr=2^{log2_lr}: {bpb:.4f} bpb",
                    flush=True,
                )
    summary = {}
    for kind in ("sp", "completep"):
        fits = {}
        for depth in depths:
            rows = [r for r in runs if r["kind"] == kind and r["depth"] == depth]
            fits[depth] = fit_optimal_lr(
                [2.0 ** r["log2_lr"] for r in rows], [r["val_bpb"] for r in rows]
            )
        summary[kind] = {
            "fits": fits,
            "slope": loglog_slope(depths, [fits[d]["log2_lr"] for d in depths]),
        }
    result = {"device": device, "width": width, "depths": depths, "runs": runs, "summary": summary}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_lr_transfer.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
