"""Triton forward selective scan of Mamba-1: the state of a block of channels lives in registers.

Grid ``(batch, cdiv(d_inner, BLOCK_D))``: program ``(b, j)`` owns channels
``[j·BLOCK_D, (j+1)·BLOCK_D)`` of sequence ``b`` and walks the L steps in order, keeping its
``(BLOCK_D, N)`` state in float32 registers:

    h <- exp(delta_t · A) * h + (delta_t · u_t) B_t,    y_t = <h, C_t> + D u_t,    y_t *= silu(z_t)

One read of u, delta, z (per channel) and B, C (per step) and one write of y: the memory-bound
minimum, never a ``(batch, d_inner, L, N)`` tensor. Forward only (inference and SPSA
calibration); training uses the chunked torch scan, whose autograd is tested.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["triton_selective_scan"]

_empty = torch.empty  # the output allocator (tests swap in a NaN-poisoned one)


@triton.jit
def _scan_fwd_kernel(
    u_ptr,  # float32 (B, D, L)
    dt_ptr,  # float32 (B, D, L)
    a_ptr,  # float32 (D, N)
    b_ptr,  # float32 (B, N, L)
    c_ptr,  # float32 (B, N, L)
    d_ptr,  # float32 (D,) (zeros when absent)
    z_ptr,  # float32 (B, D, L) (unused unless HAS_Z)
    h0_ptr,  # float32 (B, D, N) (unused unless HAS_H0)
    y_ptr,  # float32 (B, D, L)
    hl_ptr,  # float32 (B, D, N): the last state
    d_inner,
    n_state,
    length,
    HAS_Z: tl.constexpr,
    HAS_H0: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1).to(tl.int64)
    chans = blk * BLOCK_D + tl.arange(0, BLOCK_D)
    states = tl.arange(0, BLOCK_N)
    cmask = chans < d_inner
    smask = states < n_state
    mask2 = cmask[:, None] & smask[None, :]
    a = tl.load(a_ptr + chans[:, None] * n_state + states[None, :], mask=mask2, other=0.0)
    dskip = tl.load(d_ptr + chans, mask=cmask, other=0.0)
    hoff = (seq * d_inner + chans[:, None]) * n_state + states[None, :]
    if HAS_H0:
        h = tl.load(h0_ptr + hoff, mask=mask2, other=0.0)
    else:
        h = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
    row = (seq * d_inner + chans) * length  # (BLOCK_D,) offsets of u/delta/z/y rows
    bc = (seq * n_state + states) * length  # (BLOCK_N,) offsets of B/C rows
    for t in range(0, length):
        u = tl.load(u_ptr + row + t, mask=cmask, other=0.0)
        dt = tl.load(dt_ptr + row + t, mask=cmask, other=0.0)
        bt = tl.load(b_ptr + bc + t, mask=smask, other=0.0)
        ct = tl.load(c_ptr + bc + t, mask=smask, other=0.0)
        h = tl.exp(dt[:, None] * a) * h + (dt * u)[:, None] * bt[None, :]
        y = tl.sum(h * ct[None, :], axis=1) + dskip * u
        if HAS_Z:
            z = tl.load(z_ptr + row + t, mask=cmask, other=0.0)
            y = y * (z / (1.0 + tl.exp(-z)))
        tl.store(y_ptr + row + t, y, mask=cmask)
    tl.store(hl_ptr + hoff, h, mask=mask2)


def triton_selective_scan(u, delta, A, B, C, D=None, z=None, h0=None, return_last_state=False):
    """The :func:`mambaspectrum.selective_scan` contract on the Triton kernel (shapes checked by
    the caller). Computes in float32; returns ``u``'s dtype."""
    batch, d_inner, length = u.shape
    n = A.shape[1]

    def f32(t):
        return t.to(torch.float32).contiguous()

    uf, df, af, bf, cf = f32(u), f32(delta), f32(A), f32(B), f32(C)
    dd = f32(D) if D is not None else torch.zeros(d_inner, device=u.device, dtype=torch.float32)
    zf = f32(z) if z is not None else uf
    hf = f32(h0) if h0 is not None else uf
    y = _empty(batch, d_inner, length, device=u.device, dtype=torch.float32)
    last = _empty(batch, d_inner, n, device=u.device, dtype=torch.float32)
    block_n = triton.next_power_of_2(max(n, 1))
    block_d = max(1, min(32, triton.next_power_of_2(d_inner)))
    grid = (batch, triton.cdiv(d_inner, block_d))
    _scan_fwd_kernel[grid](
        uf, df, af, bf, cf, dd, zf, hf, y, last, d_inner, n, length,
        HAS_Z=z is not None, HAS_H0=h0 is not None, BLOCK_D=block_d, BLOCK_N=block_n,
    )  # fmt: skip
    y = y.to(u.dtype)
    return (y, last.to(u.dtype)) if return_last_state else y
