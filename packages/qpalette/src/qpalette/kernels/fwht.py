"""Triton fast Walsh-Hadamard transform (Sylvester order, times a scale) over contiguous rows.

One program per row of length N (a power of two): the row is loaded, the first stage is done in
registers and written to the output row, then log2(N) - 1 stages of N/2 butterflies
``(y[i], y[i+h]) <- (y[i] + y[i+h], y[i] - y[i+h])`` run in place on the output row, separated
by ``tl.debug_barrier()`` (each butterfly reads and writes the same two slots, so a stage has no
intra-stage hazard; the barrier orders one stage's stores before the next stage's loads). The
scale is applied in the last stage. Computes in float32 (float64 for float64 rows); pointer
arithmetic only, so it runs under ``TRITON_INTERPRET=1`` (where barriers are no-ops).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["fwht_rows"]


@triton.jit
def _fwht_kernel(
    x_ptr, y_ptr, scale_ptr, x_stride, y_stride,
    N: tl.constexpr, LOG2N: tl.constexpr, FP64: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    xp = x_ptr + row * x_stride
    yp = y_ptr + row * y_stride
    cd = tl.float64 if FP64 else tl.float32
    out_ty = y_ptr.dtype.element_ty
    p = tl.arange(0, N // 2)
    for s in tl.static_range(LOG2N):
        h: tl.constexpr = 1 << s
        i = (p // h) * (2 * h) + (p % h)  # the butterflies' low slots (bit s clear)
        src = xp if s == 0 else yp
        if s > 0:
            tl.debug_barrier()
        a = tl.load(src + i).to(cd)
        b = tl.load(src + i + h).to(cd)
        u = a + b
        v = a - b
        if s == LOG2N - 1:
            scale = tl.load(scale_ptr).to(cd)
            u = u * scale
            v = v * scale
        tl.store(yp + i, u.to(out_ty))
        tl.store(yp + i + h, v.to(out_ty))


def fwht_rows(x: torch.Tensor, scale: float = 1.0, out: torch.Tensor | None = None) -> torch.Tensor:
    """``scale · H_N x`` for every row of ``x`` (R, N), N a power of two >= 2, last dim stride 1."""
    r, n = x.shape
    y = torch.empty_like(x) if out is None else out
    if r == 0:
        return y
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32
    scale_t = torch.tensor([scale], dtype=cd, device=x.device)
    _fwht_kernel[(r,)](
        x, y, scale_t, x.stride(0), y.stride(0),
        N=n, LOG2N=n.bit_length() - 1, FP64=x.dtype == torch.float64,
        num_warps=max(1, min(8, n // 512)),
    )  # fmt: skip
    return y
