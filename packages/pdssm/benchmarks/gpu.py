"""GPU benchmark for pdssm: Triton PD scan correctness and speed against the torch and dense scans.

Run on a CUDA machine from the repository root::

    uv run python packages/pdssm/benchmarks/gpu.py --out gpu-results.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU; the tests
do this so the script is known to work). Sections:

1. correctness (complex64): Triton (sequential-in-time and chunked) vs the torch sequential and
   parallel scans, against the complex128 reference, forward and backward, both orientations;
2. forward+backward time and peak memory at fixed B·L tokens over L and N: dense N×N loop
   (official style), torch parallel scan, Triton sequential, Triton chunked, and the
   complex-diagonal recurrence (P = I) as the cost floor;
3. the P generator's cost (softmax-weighted dictionary, K·N² per token) next to the recurrence.

The kernels compute in float32 (complex64); there is no bf16 path (the recurrence multiplies up
to L contractions, which bf16's 8-bit mantissa would not survive), so no bf16 rows are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from pdssm import pd_scan
from pdssm.reference import sequential_scan

from neurips25_core.bench import environment, peak_memory_cuda, time_fn
from neurips25_core.testing import relative_error


def _inputs(batch, length, size, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(0, size, (batch, length, size), generator=g)
    mag = 0.5 + 0.5 * torch.rand(batch, length, size, generator=g, dtype=torch.float64)
    d = torch.polar(
        mag, 2 * torch.pi * torch.rand(batch, length, size, generator=g, dtype=torch.float64)
    )
    b = torch.randn(batch, length, size, generator=g, dtype=torch.complex128)
    x0 = torch.randn(batch, size, generator=g, dtype=torch.complex128)
    return p.to(device), d.to(device), b.to(device), x0.to(device)


def _fwd_bwd(fn, d, b, x0, upstream):
    d, b, x0 = (t.detach().clone().requires_grad_() for t in (d, b, x0))
    out = fn(d, b, x0)
    grads = torch.autograd.grad(out, [d, b, x0], upstream)
    return out.detach(), grads


def correctness(device, toy: bool) -> list[dict]:
    shapes = [(2, 9, 5)] if toy else [(4, 512, 32), (2, 1024, 64), (2, 2048, 128), (1, 777, 100)]
    backends = ["sequential", "torch", "triton", "triton_chunked"]
    rows = []
    for batch, length, size in shapes:
        p, d, b, x0 = _inputs(batch, length, size, device)
        g = torch.Generator().manual_seed(1)
        upstream = torch.randn(batch, length, size, generator=g, dtype=torch.complex128).to(device)
        for orientation in ("column", "row"):
            ref, ref_grads = _fwd_bwd(
                lambda d_, b_, x_, o=orientation, p=p: sequential_scan(p, d_, b_, x_, o),
                d,
                b,
                x0,
                upstream,
            )
            for backend in backends:

                def fn(d_, b_, x_, be=backend, o=orientation, p=p):
                    return pd_scan(p, d_, b_, x_, o, be)

                out, grads = _fwd_bwd(
                    fn,
                    d.to(torch.complex64),
                    b.to(torch.complex64),
                    x0.to(torch.complex64),
                    upstream.to(torch.complex64),
                )
                row = {
                    "B": batch,
                    "L": length,
                    "N": size,
                    "orientation": orientation,
                    "backend": backend,
                    "out": relative_error(out, ref),
                    **{
                        f"grad_{n}": relative_error(gr, rg)
                        for n, gr, rg in zip(("d", "b", "x0"), grads, ref_grads)
                    },
                }
                row["ok"] = all(row[k] <= 1e-4 for k in ("out", "grad_d", "grad_b", "grad_x0"))
                rows.append(row)
                print(
                    f"  {backend:15s} {orientation:6s} B{batch} L{length} N{size}: out {row['out']:.1e}, "
                    f"grad d {row['grad_d']:.1e}, b {row['grad_b']:.1e}, x0 {row['grad_x0']:.1e} {'ok' if row['ok'] else 'FAIL'}"
                )
    return rows


def _diagonal(d, b):
    x = torch.zeros_like(b[:, 0])
    states = []
    for d_t, b_t in zip(d.unbind(1), b.unbind(1)):
        x = d_t * x + b_t
        states.append(x)
    return torch.stack(states, 1)


def speed(device, toy: bool) -> list[dict]:
    if toy:
        grid, tokens = [(8, 5)], 16
    else:
        grid = [(length, size) for length in (512, 2048, 8192) for size in (32, 64, 128, 256)]
        tokens = 16384
    rows = []
    cuda = device.type == "cuda"
    for length, size in grid:
        batch = max(tokens // length, 1)
        p, d, b, _ = _inputs(batch, length, size, device)
        d, b = d.to(torch.complex64), b.to(torch.complex64)
        row = {"B": batch, "L": length, "N": size}
        for backend in ("dense", "torch", "triton", "triton_chunked", "diagonal"):
            if backend == "dense" and batch * length * size * size * 8 * 4 > (
                60 << 30 if cuda else 1 << 28
            ):
                row[f"{backend}_ms"] = None  # would not fit
                continue
            dd, bb = d.clone().requires_grad_(), b.clone().requires_grad_()

            def step(be=backend, dd=dd, bb=bb, p=p):
                out = _diagonal(dd, bb) if be == "diagonal" else pd_scan(p, dd, bb, backend=be)
                out.real.sum().backward()

            t = time_fn(
                step,
                warmup=0 if toy else 1,
                repeats=1 if toy else None,
                min_time=0.2,
                max_repeats=20,
            )
            row[f"{backend}_ms"] = t.median * 1e3
            if cuda:
                row[f"{backend}_peak_MiB"] = peak_memory_cuda(step) / 2**20
        # The P generator of one layer (K = 8): O(K·N²) per token in every variant.
        u = torch.randn(batch, length, size, device=device, requires_grad=True)
        sel = torch.randn(size, 8, device=device, requires_grad=True)
        dic = torch.randn(8, size, size, device=device, requires_grad=True)

        def gen(u=u, sel=sel, dic=dic):
            w = torch.softmax(u @ sel, -1)
            soft = torch.softmax(torch.einsum("blk,kmn->blnm", w, dic), -1)
            soft.sum().backward()

        row["generator_ms"] = (
            time_fn(
                gen,
                warmup=0 if toy else 1,
                repeats=1 if toy else None,
                min_time=0.2,
                max_repeats=20,
            ).median
            * 1e3
        )
        rows.append(row)
        print(
            "  "
            + ", ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
            )
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--toy", action="store_true", help="tiny shapes (CPU interpreter without a GPU)"
    )
    parser.add_argument("--out", default="pdssm-gpu.json", help="JSON output path")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"pdssm GPU benchmark on {device} ({'toy' if args.toy else 'full'} shapes)")
    start = time.perf_counter()
    print("1. correctness (complex64 vs complex128 reference, fwd and bwd)")
    checks = correctness(device, args.toy)
    print("2-3. forward+backward time (ms) and peak memory at fixed tokens; generator cost")
    timings = speed(device, args.toy)
    result = {
        "env": environment(),
        "device": str(device),
        "toy": args.toy,
        "correctness": checks,
        "speed": timings,
        "seconds": time.perf_counter() - start,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")
    return 0 if all(r["ok"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
