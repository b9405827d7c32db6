"""GPU check and timings of the ParetoQ packed low-bit matmul (Triton) on Llama-3-8B shapes.

1. Correctness, every bit width (1, 1.58, 2, 3, 4), fp32 and bf16 activations: the Triton kernel
   against ``x @ dequant(W).T`` computed in float64 (relative norm error; fp32 ≤ 1e-5, bf16 ≤ 1.6e-2).
2. Timings (``triton.testing.do_bench``, median µs) at (N, K) ∈ {(4096, 4096), (14336, 4096),
   (4096, 14336)}, M ∈ {1, 16, 128}, bf16, against cuBLAS bf16 ``torch.matmul`` with the dense
   weight and against dequantize-then-matmul; weight-bytes GB/s and speed-ups.

Prints a table and writes JSON (``--out``, default ``gpu_results.json``).

    python packages/paretoq/benchmarks/gpu.py                 # on a CUDA machine
    TRITON_INTERPRET=1 python packages/paretoq/benchmarks/gpu.py --toy   # tiny shapes, CPU interpreter
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import paretoq
import torch

from neurips25_core.testing import randn, relative_error

BITS = (1, 1.58, 2, 3, 4)
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
MS = (1, 16, 128)
TOY_SHAPES = [(48, 96), (32, 160)]
TOY_MS = (1, 16)


def _packed(n: int, k: int, bits: float, device: str, seed: int = 0) -> paretoq.PackedLinear:
    lin = torch.nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(randn(n, k, seed=seed, scale=0.02))
    q = paretoq.QuantLinear.from_linear(lin, bits)
    return paretoq.PackedLinear.from_quant_linear(q, backend="triton").to(device)


def _bench(fn, device: str) -> float:
    """Median seconds."""
    if device == "cuda":
        import triton

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3
    from neurips25_core.bench import time_fn

    # --toy on CPU (the interpreter) only checks that the timing path runs: one call each.
    return time_fn(fn, warmup=0, repeats=1).median


def correctness(device: str, toy: bool) -> list[dict]:
    rows = []
    shapes = TOY_SHAPES if toy else [(512, 1024), (1000, 777)]
    dtypes = (torch.float32,) if (toy and device == "cpu") else (torch.float32, torch.bfloat16)
    for bits in BITS:
        for n, k in shapes:
            layer = _packed(n, k, bits, device, seed=n + k)
            w = layer.dequantize(torch.float64)
            for m in (1, 17) if toy else (1, 16, 33):
                for dtype in dtypes:
                    x = randn(m, k, seed=m, dtype=dtype, device=device)
                    ref = x.double() @ w.T
                    with torch.no_grad():
                        out = paretoq.packed_matmul(
                            x, layer.planes, layer.scale, bits, k, backend="triton"
                        )
                    err = relative_error(out, ref)
                    tol = 1e-5 if dtype == torch.float32 else 1.6e-2
                    rows.append({"bits": bits, "N": n, "K": k, "M": m, "dtype": str(dtype).replace("torch.", ""),
                                 "rel_err": err, "ok": bool(err <= tol)})  # fmt: skip
    return rows


def timings(device: str, toy: bool) -> list[dict]:
    rows = []
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    for n, k in TOY_SHAPES if toy else SHAPES:
        dense_w = randn(n, k, seed=1, dtype=dtype, device=device, scale=0.02)
        for bits in BITS:
            layer = _packed(n, k, bits, device)
            weight_bytes = (
                sum(p.numel() * 4 for p in layer.planes)
                + layer.scale.numel() * layer.scale.element_size()
            )
            for m in TOY_MS if toy else MS:
                x = randn(m, k, seed=m, dtype=dtype, device=device)
                with torch.no_grad():
                    t_ours = _bench(
                        lambda x=x, lay=layer, b=bits, kk=k: paretoq.packed_matmul(
                            x, lay.planes, lay.scale, b, kk, backend="triton"
                        ),
                        device,
                    )
                    t_dense = _bench(lambda x=x, w=dense_w: torch.matmul(x, w.T), device)
                    t_deq = _bench(
                        lambda x=x, lay=layer: torch.matmul(x, lay.dequantize(dtype).T), device
                    )
                rows.append({
                    "bits": bits, "N": n, "K": k, "M": m, "dtype": str(dtype).replace("torch.", ""),
                    "us_packed": t_ours * 1e6, "us_dense": t_dense * 1e6, "us_dequant_matmul": t_deq * 1e6,
                    "speedup_vs_dense": t_dense / t_ours, "speedup_vs_dequant": t_deq / t_ours,
                    "weight_GBps": weight_bytes / t_ours / 1e9, "weight_bytes": weight_bytes,
                    "dense_weight_bytes": n * k * dense_w.element_size(),
                })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--toy", action="store_true", help="tiny shapes (runs under TRITON_INTERPRET=1 on CPU)"
    )
    ap.add_argument("--out", default="gpu_results.json", help="JSON output path")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.toy:
        print("no CUDA GPU: run with --toy under TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    start = time.perf_counter()
    corr = correctness(device, args.toy)
    bad = [r for r in corr if not r["ok"]]
    worst = max(corr, key=lambda r: r["rel_err"] if math.isfinite(r["rel_err"]) else math.inf)
    print(
        f"correctness: {len(corr) - len(bad)}/{len(corr)} within tolerance; worst rel err {worst['rel_err']:.2e} ({worst})"
    )
    times = timings(device, args.toy)
    print(
        f"{'bits':>5} {'N':>6} {'K':>6} {'M':>4} {'packed µs':>10} {'dense µs':>9} {'deq+mm µs':>10} {'×dense':>7} {'×deq':>6} {'GB/s':>7}"
    )
    for r in times:
        print(f"{r['bits']:>5} {r['N']:>6} {r['K']:>6} {r['M']:>4} {r['us_packed']:>10.1f} {r['us_dense']:>9.1f} "
              f"{r['us_dequant_matmul']:>10.1f} {r['speedup_vs_dense']:>7.2f} {r['speedup_vs_dequant']:>6.2f} {r['weight_GBps']:>7.1f}")  # fmt: skip
    env = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__, "toy": args.toy, "seconds": time.perf_counter() - start,
    }  # fmt: skip
    Path(args.out).write_text(
        json.dumps({"env": env, "correctness": corr, "timings": times}, indent=2)
    )
    print(f"wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
