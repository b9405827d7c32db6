"""GPU measurements for ultradelta: Triton decode-and-add vs torch reconstruction.

Correctness first (Triton vs the CPU reconstruction, <= 1e-6 relative), then timings at LLaMA-2-7B
shapes (4096x4096, 11008x4096) at s = 0.97, b = 4: fused decode-and-add, the torch path of the
same op, and ``to_dense()`` + add; effective GB/s (bytes read: base weight, codes, mask; written:
weight) against the core's roofline (memory-bound).

    python packages/ultradelta/benchmarks/gpu.py          # on a CUDA machine
    TRITON_INTERPRET=1 python packages/ultradelta/benchmarks/gpu.py --toy   # CPU, tiny shape
"""

from __future__ import annotations

import argparse
import json

import torch
from ultradelta import UltraDeltaConfig, apply_compressed, compress, to_device_format

from neurips25_core.bench import time_fn


def _timings(work, fmt, ct, device, m, k) -> dict:
    dense_on_device = ct.to_dense().to(device)
    tri = time_fn(lambda: apply_compressed(work, **fmt, backend="triton"), device=device)
    tor = time_fn(lambda: apply_compressed(work, **fmt, backend="torch"), device=device)
    recon = time_fn(lambda: work.add_(ct.to_dense().to(device)), device=device)
    dense = time_fn(lambda: work.add_(dense_on_device), device=device)
    moved = 2 * 4 * m * k + fmt["codes"].numel() + 4 * fmt["mask_words"].numel()
    return dict(
        triton_s=tri.median,
        torch_s=tor.median,
        to_dense_add_s=recon.median,
        dense_add_s=dense.median,
        triton_GBps=moved / tri.median / 1e9,
        speedup_vs_torch=tor.median / tri.median,
        speedup_vs_reconstruction=recon.median / tri.median,
    )


def run(toy: bool) -> list[dict]:
    device = "cpu" if toy else "cuda"
    shapes = [(37, 53), (64, 129)] if toy else [(4096, 4096), (11008, 4096)]
    rows = []
    for m, k in shapes:
        t = torch.randn(m, k, generator=torch.Generator().manual_seed(0)) * 1e-3
        (c,) = compress([{"w": t}], UltraDeltaConfig(sparsity=0.97, bits=4))
        ct = c.tensors["w"]
        fmt = to_device_format(ct, device=device)
        base = torch.randn(m, k, generator=torch.Generator().manual_seed(1)).to(device)
        expected = base.cpu() + ct.to_dense()
        out = base.clone()
        apply_compressed(out, **fmt, backend="triton")
        err = float((out.cpu() - expected).norm() / expected.norm())
        if err > 1e-6:
            raise AssertionError(f"triton decode-and-add differs from the reference: {err:.2e}")
        row = {"m": m, "k": k, "rel_err": err}
        if not toy:
            row.update(_timings(base.clone(), fmt, ct, device, m, k))
        rows.append(row)
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--toy", action="store_true", help="tiny shapes on CPU (TRITON_INTERPRET=1)"
    )
    args = parser.parse_args(argv)
    rows = run(args.toy)
    print(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
