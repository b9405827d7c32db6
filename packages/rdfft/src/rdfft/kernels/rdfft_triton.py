"""Triton rdFFT: one program per row, in place in global memory.

The program owning a row runs the same decimation-in-time schedule as :mod:`rdfft.fft`:

* forward: bit-reversal gather fused with the size-2 stage (load the N/2 pairs
  ``x[rev(2p)], x[rev(2p+1)]``, barrier, store ``a ± b`` at ``2p, 2p+1``), then for
  ``L = 4 … N`` one stage of N/4 four-slot butterflies (task ``t``: block ``t // (L/4)``,
  ``j = t % (L/4)``; slots ``j, L/2-j, L/2+j, L-j``; the ``j = 0`` task does ``Y_0``, ``Y_{L/2}``,
  negates slot ``3L/4`` and rewrites slot ``L/4`` unchanged), separated by ``tl.debug_barrier()``;
* inverse: the stages in reverse with their 1/2, the last (size 2) fused with the bit-reversal
  scatter.

Every butterfly reads and writes the same four slots, so a stage has no intra-stage hazard; the
barriers order one stage's stores before the next stage's loads (and the gather's loads before its
stores). bfloat16 rows are upcast to float32 in registers and rounded once per stage, like the
torch path (round to nearest even, done on the bits so the interpreter agrees); float64 rows compute in float64. Twiddles ``W_N^k = exp(-2πik/N)``, ``k < N/4``, come
from a host table computed in float64 and cast to the compute dtype; stage ``L`` reads entry
``j·N/L``. Pointer arithmetic only (no block pointers), so it runs under ``TRITON_INTERPRET=1``,
where barriers are no-ops (the race check lives in ``benchmarks/gpu.py``).

No argument checks here: :mod:`rdfft.ops` does them.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

__all__ = ["launch"]


@triton.jit
def _bitrev(i, LOG2N: tl.constexpr):
    r = tl.zeros_like(i)
    for b in tl.static_range(LOG2N):
        r = r | (((i >> b) & 1) << (LOG2N - 1 - b))
    return r


@triton.jit
def _out(v, out_ty: tl.constexpr, BF16: tl.constexpr):
    """Cast a compute value to the row dtype; bfloat16 is rounded to nearest even explicitly.

    The explicit rounding (on the float32 bits) makes the cast exact afterwards, so the result
    is the same on GPU and under the interpreter (whose float32 -> bfloat16 cast truncates).
    """
    if BF16:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
        v = bits.to(tl.float32, bitcast=True)
    return v.to(out_ty)


@triton.jit
def _slots(t, L: tl.constexpr):
    """The four slot offsets of butterfly task ``t`` in a stage of size ``L`` (L >= 4)."""
    Q: tl.constexpr = L // 4
    HALF: tl.constexpr = L // 2
    j = t % Q
    base = (t // Q) * L
    j0 = j == 0
    s0 = base + j
    s1 = tl.where(j0, base + HALF, base + HALF - j)
    s2 = tl.where(j0, base + HALF + Q, base + HALF + j)
    s3 = tl.where(j0, base + Q, base + L - j)
    return j, j0, s0, s1, s2, s3


@triton.jit
def _rdfft_row_kernel(
    x_ptr,
    tw_re_ptr,
    tw_im_ptr,
    row_stride,
    N: tl.constexpr,
    LOG2N: tl.constexpr,
    QN: tl.constexpr,
    INVERSE: tl.constexpr,
    FP64: tl.constexpr,
    BF16: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    ptr = x_ptr + row * row_stride
    out_ty = x_ptr.dtype.element_ty
    cd = tl.float64 if FP64 else tl.float32
    p = tl.arange(0, N // 2)
    t = tl.arange(0, QN)
    if not INVERSE:
        # bit-reversal gather fused with the size-2 stage
        src = _bitrev(2 * p, LOG2N)
        a = tl.load(ptr + src).to(cd)
        b = tl.load(ptr + src + N // 2).to(cd)  # rev(2p + 1) = rev(2p) + N/2
        tl.debug_barrier()
        tl.store(ptr + 2 * p, _out(a + b, out_ty, BF16))
        tl.store(ptr + 2 * p + 1, _out(a - b, out_ty, BF16))
        for s in tl.static_range(2, LOG2N + 1):
            L: tl.constexpr = 1 << s
            tl.debug_barrier()
            j, j0, s0, s1, s2, s3 = _slots(t, L)
            live = t < N // 4
            er = tl.load(ptr + s0, mask=live, other=0.0).to(cd)
            ei = tl.load(ptr + s1, mask=live, other=0.0).to(cd)
            odr = tl.load(ptr + s2, mask=live, other=0.0).to(cd)
            odi = tl.load(ptr + s3, mask=live, other=0.0).to(cd)
            k = j * (N // L)
            wr = tl.load(tw_re_ptr + k, mask=live, other=1.0).to(cd)
            wi = tl.load(tw_im_ptr + k, mask=live, other=0.0).to(cd)
            tr = wr * odr - wi * odi
            ti = wr * odi + wi * odr
            o0 = tl.where(j0, er + ei, er + tr)
            o1 = tl.where(j0, er - ei, er - tr)
            o2 = tl.where(j0, -odr, ti - ei)
            o3 = tl.where(j0, odi, ei + ti)
            tl.store(ptr + s0, _out(o0, out_ty, BF16), mask=live)
            tl.store(ptr + s1, _out(o1, out_ty, BF16), mask=live)
            tl.store(ptr + s2, _out(o2, out_ty, BF16), mask=live)
            tl.store(ptr + s3, _out(o3, out_ty, BF16), mask=live)
    else:
        for r in tl.static_range(0, LOG2N - 1):
            L: tl.constexpr = N >> r
            if r > 0:
                tl.debug_barrier()
            j, j0, s0, s1, s2, s3 = _slots(t, L)
            live = t < N // 4
            a = tl.load(ptr + s0, mask=live, other=0.0).to(cd)
            b = tl.load(ptr + s1, mask=live, other=0.0).to(cd)
            c = tl.load(ptr + s2, mask=live, other=0.0).to(cd)
            d = tl.load(ptr + s3, mask=live, other=0.0).to(cd)
            k = j * (N // L)
            wr = tl.load(tw_re_ptr + k, mask=live, other=1.0).to(cd)
            wi = tl.load(tw_im_ptr + k, mask=live, other=0.0).to(cd)
            tr = (a - b) * 0.5
            ti = (d + c) * 0.5
            o0 = (a + b) * 0.5
            o1 = tl.where(j0, (a - b) * 0.5, (d - c) * 0.5)
            o2 = tl.where(j0, -c, wr * tr + wi * ti)
            o3 = tl.where(j0, d, wr * ti - wi * tr)
            tl.store(ptr + s0, _out(o0, out_ty, BF16), mask=live)
            tl.store(ptr + s1, _out(o1, out_ty, BF16), mask=live)
            tl.store(ptr + s2, _out(o2, out_ty, BF16), mask=live)
            tl.store(ptr + s3, _out(o3, out_ty, BF16), mask=live)
        if LOG2N > 1:
            tl.debug_barrier()
        # size-2 stage fused with the bit-reversal scatter
        y0 = tl.load(ptr + 2 * p).to(cd)
        ym = tl.load(ptr + 2 * p + 1).to(cd)
        tl.debug_barrier()
        dst = _bitrev(2 * p, LOG2N)
        tl.store(ptr + dst, _out((y0 + ym) * 0.5, out_ty, BF16))
        tl.store(ptr + dst + N // 2, _out((y0 - ym) * 0.5, out_ty, BF16))


@functools.lru_cache(maxsize=64)
def _twiddle_table(n: int, dtype: torch.dtype, device: torch.device):
    k = torch.arange(max(n // 4, 1), dtype=torch.float64)
    angle = 2 * math.pi * k / n
    return torch.cos(angle).to(dtype).to(device), (-torch.sin(angle)).to(dtype).to(device)


def _num_warps(n: int) -> int:
    return max(1, min(8, n // 512))


def launch(rows: torch.Tensor, inverse: bool) -> torch.Tensor:
    """Transform every row of ``rows`` (R, N), last dim stride 1, in place; returns ``rows``."""
    r, n = rows.shape
    if r == 0:
        return rows
    fp64 = rows.dtype == torch.float64
    tw_re, tw_im = _twiddle_table(n, torch.float64 if fp64 else torch.float32, rows.device)
    _rdfft_row_kernel[(r,)](
        rows,
        tw_re,
        tw_im,
        rows.stride(0),
        N=n,
        LOG2N=n.bit_length() - 1,
        QN=max(n // 4, 1),
        INVERSE=bool(inverse),
        FP64=fp64,
        BF16=rows.dtype == torch.bfloat16,
        num_warps=_num_warps(n),
    )
    return rows
