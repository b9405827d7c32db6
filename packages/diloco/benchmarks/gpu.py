"""GPU measurements for diloco (one H200, under 5 minutes); ``--toy`` runs the same code on CPU.

1. Outer-step time (all-reduce at world 1, restore, Nesterov step, backup copy) at 10M and 100M
   parameters, with θ_global backed up on the GPU versus in pinned CPU memory.
2. The ladder extended to about 1M and 3M parameters: DP (DDP, two ranks) versus DiLoCo M = 2, two
   gloo ranks sharing the GPU (NCCL cannot put two ranks on one GPU), γ taken from the γ*(N) fits
   of the committed full run.

Usage:
    uv run python packages/diloco/benchmarks/gpu.py --out packages/diloco/results/gpu
    uv run python packages/diloco/benchmarks/gpu.py --toy --out /tmp/diloco-gpu-toy
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

FULL = Path(__file__).resolve().parents[1] / "results" / "full" / "quality.json"


def outer_step_time(parameters: int, backup_device: str, device: str, repeats: int) -> float:
    from diloco import DiLoCo, DiLoCoConfig

    from neurips25_core.bench import time_fn

    width = 1024
    layers = max(1, parameters // (width * width))
    model = torch.nn.Sequential(
        *[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    d = DiLoCo(model, opt, DiLoCoConfig(sync_every=30, outer_lr=0.6, backup_device=backup_device))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-3)
    return time_fn(d.sync, repeats=repeats).median


def gamma_star(n: int, label: str, default: float) -> float:
    if FULL.exists():
        fits = json.loads(FULL.read_text())["fits"]["inner_lr"]
        if label in fits:
            a, alpha = fits[label]
            return float(a * n**alpha)
    return default


def main(argv: list[str] | None = None) -> dict:
    from diloco.training import RunSpec, run

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--toy", action="store_true", help="tiny sizes on CPU (the test of this script)"
    )
    ap.add_argument("--out", default="bench-out/diloco-gpu")
    args = ap.parse_args(argv)
    if not args.toy and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --toy on CPU")
    device = "cpu" if args.toy else "cuda"
    sizes = [2**16, 2**17] if args.toy else [10_000_000, 100_000_000]
    out: dict = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "outer_step": [],
    }
    for n in sizes:
        for backup in ("cpu", device) if device == "cuda" else ("cpu",):
            t = outer_step_time(n, backup, device, repeats=3 if args.toy else 10)
            out["outer_step"].append({"parameters": n, "backup": backup, "seconds": t})
    ladder = [(16, 1)] if args.toy else [(128, 4), (192, 6)]  # ~0.9M and ~3M parameters
    out["ladder"] = []
    for hidden, layers in ladder:
        base = RunSpec(
            hidden=hidden,
            layers=layers,
            batch=32,
            sync_every=30,
            device=device,
            steps=6 if args.toy else None,
            eval_batches=1 if args.toy else 16,
        )
        n = base.parameters
        for algo, label in (("dp", "DP"), ("diloco", "M=2")):
            spec = dataclasses.replace(
                base, algo=algo, replicas=2, inner_lr=gamma_star(n, label, 1.13e-2)
            )
            res = run(spec)
            out["ladder"].append(
                {
                    "label": label,
                    "parameters": n,
                    "gamma": spec.inner_lr,
                    "val_loss": res["val_loss"],
                    "steps": res["steps"],
                    "seconds": res["seconds"],
                }
            )
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpu.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
