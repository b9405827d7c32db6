"""GPU benchmark for lrannealing: batched whole-curve prediction over many candidate schedules.

Schedule search scores thousands of candidate schedules under a fitted law. This script builds
N WSD-family schedules of T+1 steps (random decay fraction, shape and final LR), computes S₁
(cumsum) and S₂ (:func:`lrannealing.s2_torch`, the chunked scan) in batches on the device, and
reports schedules per second on CPU and on CUDA. Correctness first: a few rows are compared with
the float64 numpy path (``LRAnnealingLaw.predict``).

Run on a CUDA machine from the repository root::

    uv run python packages/lrannealing/benchmarks/gpu.py --out gpu-results.json   # N = 1e4, T = 1e5

``--toy`` runs N = 16, T = 1000 on whatever device exists (the tests run it on CPU). Not measured
on a GPU in this repository yet.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from lrannealing import LRAnnealingLaw, s2_torch, schedules

from neurips25_core.bench import environment

LAW = LRAnnealingLaw(L0=1.4, A=0.25, C=0.05, alpha=0.5, decay=0.999)


def candidates(n: int, T: int, peak: float = 3e-3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shapes = ("cosine", "linear", "1-sqrt")
    rows = [
        schedules.wsd(
            T,
            peak,
            decay_frac=float(rng.uniform(0.05, 1.0)),
            shape=shapes[i % 3],
            min_lr=float(rng.choice([0.0, 0.01, 0.1])) * peak,
        )
        for i in range(n)
    ]
    return np.stack(rows)


def predict_final(law: LRAnnealingLaw, lrs: torch.Tensor) -> torch.Tensor:
    """The law's loss at the last step of every row of ``lrs`` (N, T+1) (no warm-up)."""
    s1 = lrs.sum(dim=-1)
    s2 = s2_torch(lrs, law.decay)[..., -1]
    return law.L0 + law.A * torch.exp(-law.alpha * torch.log(s1)) - law.C * s2


def run(n: int, T: int, batch: int, device: str, dtype: torch.dtype) -> dict:
    lrs = candidates(n, T)
    ref = np.array([LAW.predict(row, [T])[0] for row in lrs[:4]])
    t_lrs = torch.from_numpy(lrs).to(device=device, dtype=dtype)
    got = predict_final(LAW, t_lrs[:4]).double().cpu().numpy()
    error = float(np.max(np.abs(got - ref) / ref))

    def once():
        out = [predict_final(LAW, t_lrs[i : i + batch]) for i in range(0, n, batch)]
        if device == "cuda":
            torch.cuda.synchronize()
        return torch.cat(out)

    once()
    start = time.perf_counter()
    repeats = 3
    for _ in range(repeats):
        once()
    seconds = (time.perf_counter() - start) / repeats
    return {
        "device": device,
        "dtype": str(dtype),
        "N": n,
        "T": T,
        "batch": batch,
        "max_rel_error_vs_numpy_fp64": error,
        "seconds": seconds,
        "schedules_per_s": n / seconds,
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toy", action="store_true", help="N=16, T=1000 (seconds, any device)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    n, T, batch = (16, 1000, 8) if args.toy else (10_000, 100_000, 250)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = []
    for device in devices:
        for dtype in (torch.float64, torch.float32):
            if device == "cpu" and not args.toy and dtype == torch.float64:
                continue  # hours on CPU; fp32 is the comparison
            r = run(n if device == "cuda" or args.toy else n // 10, T, batch, device, dtype)
            r.update(environment())
            print(json.dumps(r))
            results.append(r)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1)
    return results


if __name__ == "__main__":
    main()
