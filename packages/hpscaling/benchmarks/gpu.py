"""Experiment A at about 100× the compute on one GPU, in a fixed time budget (one prepared script).

    python packages/hpscaling/benchmarks/gpu.py --out /tmp/hp-gpu            # GPU, ~5 min
    python packages/hpscaling/benchmarks/gpu.py --toy --out /tmp/hp-toy      # CPU, seconds (tested)

The full size is a Llama of hidden 256, 4 layers (≈3.3M parameters), D = 20·N, B ∈ {16, 32, 64,
128} sequences. It first times a few steps at every B, then plans the τ grid to fit the budget:
every B keeps the τ values nearest the centre of the grid, at least 3 (a quadratic in log λ needs
3), and a B whose 3 runs do not fit is dropped, smallest B (most steps) first. Then it trains the
plan, fits λ_opt(B) and reports the Law-1 slope over all B and over the smaller half: Law 1 says
the slope is ≈ 1 while B ≪ B_crit and bends below 1 at the largest B.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from hpscaling.experiment import RunSpec, train_run
from hpscaling.fit import fit_tau_law

FULL = dict(
    hidden=256,
    layers=4,
    heads=4,
    seq_len=64,
    tpp=20.0,
    batches=(16, 32, 64, 128),
    taus=(0.03, 0.06, 0.12, 0.25, 0.5, 1.0),
    eta=3e-3,
    budget_s=270.0,
)
TOY = dict(
    hidden=16,
    layers=1,
    heads=2,
    seq_len=16,
    tpp=0.1,
    batches=(4, 8),
    taus=(0.3, 1.0, 3.0),
    eta=3e-3,
    budget_s=20.0,
)


def _step_seconds(spec: RunSpec, device: torch.device, steps: int = 3) -> float:
    """Seconds per training step of ``spec`` (a few steps after one warm-up step)."""
    from neurips25_core.models import causal_lm_loss, tiny_llama

    model = tiny_llama(spec.config, seed=0).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.eta)
    x = torch.randint(0, 256, (spec.batch, spec.seq_len), device=device)
    times = []
    with torch.enable_grad():
        for i in range(steps + 1):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = causal_lm_loss(model, x, x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def plan(cfg: dict, seconds_per_run: dict[int, float]) -> dict[int, list[float]]:
    """The τ grid per B that fits ``cfg['budget_s']``: centre-out, at least 3 τ per kept B."""
    taus = list(cfg["taus"])
    centre = (len(taus) - 1) / 2
    by_centre = sorted(taus, key=lambda t: abs(taus.index(t) - centre))
    kept = sorted(seconds_per_run)
    while kept and 3 * sum(seconds_per_run[b] for b in kept) > cfg["budget_s"]:
        kept.pop(0)
    out = {b: sorted(by_centre[:3]) for b in kept}
    spent = 3 * sum(seconds_per_run[b] for b in kept)
    for tau in by_centre[3:]:
        extra = sum(seconds_per_run[b] for b in kept)
        if spent + extra > cfg["budget_s"]:
            break
        for b in kept:
            out[b] = sorted([*out[b], tau])
        spent += extra
    return out


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, plan, train, fit; on CPU (``--toy``) everything runs on one thread."""
    from neurips25_core.bench import single_thread

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="a CPU-sized run (tested)")
    parser.add_argument("--out", default="hpscaling-gpu-out")
    parser.add_argument("--budget-s", type=float, default=None, help="training seconds to plan for")
    args = parser.parse_args(argv)
    cfg = dict(TOY if args.toy else FULL)
    if args.budget_s is not None:
        cfg["budget_s"] = args.budget_s
    device = torch.device("cuda" if torch.cuda.is_available() and not args.toy else "cpu")
    if not args.toy and device.type != "cuda":
        raise SystemExit("gpu.py: no CUDA device; use --toy for the CPU-sized run")
    if device.type == "cpu":  # tiny models on a shared CPU: one thread is several times faster
        with single_thread():
            return _main(cfg, device, args.out)
    return _main(cfg, device, args.out)


def _main(cfg: dict, device: torch.device, out_dir: str) -> dict:
    base = dict(
        hidden=cfg["hidden"],
        layers=cfg["layers"],
        heads=cfg["heads"],
        seq_len=cfg["seq_len"],
        tpp=cfg["tpp"],
        eta=cfg["eta"],
    )
    per_run = {}
    for b in cfg["batches"]:
        spec = RunSpec(batch=b, tau=1.0, **base)
        per_run[b] = _step_seconds(spec, device) * spec.sizes()["steps"]
    grid = plan(cfg, per_run)
    print(
        f"estimated seconds per run: { {b: round(s, 1) for b, s in per_run.items()} }; plan {grid}"
    )
    if len(grid) < 2:
        raise SystemExit(f"gpu.py: the budget {cfg['budget_s']} s fits fewer than 2 batch sizes")
    runs = []
    start = time.perf_counter()
    for b, taus in grid.items():
        for tau in taus:
            _, metrics = train_run(RunSpec(batch=b, tau=tau, **base), progress=False, device=device)
            runs.append(metrics)
            print(
                f"B={b} tau={tau} lam={metrics['lam']:.4g} loss={metrics['val_loss']:.4f} "
                f"({metrics['seconds']:.1f} s)",
                flush=True,
            )
    records = [
        {
            "N": r["N"],
            "D": r["D"],
            "B": r["B"],
            "eta": r["eta"],
            "lam": r["lam"],
            "loss": r["val_loss"],
        }
        for r in runs
    ]
    fit = fit_tau_law(records, window=None)
    slopes = {"all": fit.law1[0]["slope"] if fit.law1 else None}
    small = sorted(grid)[: max(2, len(grid) // 2)]
    if len(small) < len(grid):
        sub = fit_tau_law([r for r in records if r["B"] // cfg["seq_len"] in small], window=None)
        slopes["smaller_half"] = sub.law1[0]["slope"] if sub.law1 else None
    result = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "config": cfg,
        "seconds_per_run_estimate": per_run,
        "plan": grid,
        "runs": runs,
        "cells": [c.__dict__ for c in fit.cells],
        "law1_slope": slopes,
        "wall_s": time.perf_counter() - start,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_tau_invariance.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"Law-1 slope: {slopes}; wrote {out / 'gpu_tau_invariance.json'}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
