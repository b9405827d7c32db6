"""Triton PD scan: one program per sequence, sequential over time, the state in registers.

Complex numbers travel as interleaved float32 pairs (``torch.view_as_real``). Each step applies
``x ← A_t x + b_t``:

* column orientation, ``x'[m] = Σ_{n: p[n] = m} d[n]·x[n]``: a scatter-add, written as a masked
  row sum over an (N, N) register tile, ``x'[m] = Σ_n [p[n] = m]·y[n]``. O(N²) per step in
  registers, which is fine up to N ≈ 128 and is what makes collisions (merges) add correctly
  without atomics;
* row orientation, ``x'[m] = d[m]·x[q[m]]``: the same masked sum with the roles swapped (a gather).

The backward of one orientation is the reverse-time scan of the other (see :mod:`pdssm.ops`), so
this one kernel serves forward and backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["triton_states"]


@triton.jit
def _pd_scan_fwd_kernel(
    p_ptr,  # int64 (B, L, N)
    d_ptr,  # float32 (B, L, N, 2)
    b_ptr,  # float32 (B, L, N, 2)
    x0_ptr,  # float32 (B, N, 2)
    out_ptr,  # float32 (B, L, N, 2)
    length,
    size,
    COLUMN: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    valid = lanes < size
    x_re = tl.load(x0_ptr + (seq * size + lanes) * 2, mask=valid, other=0.0)
    x_im = tl.load(x0_ptr + (seq * size + lanes) * 2 + 1, mask=valid, other=0.0)
    for t in range(length):
        row = (seq * length + t) * size + lanes
        idx = tl.load(p_ptr + row, mask=valid, other=-1)
        d_re = tl.load(d_ptr + row * 2, mask=valid, other=0.0)
        d_im = tl.load(d_ptr + row * 2 + 1, mask=valid, other=0.0)
        b_re = tl.load(b_ptr + row * 2, mask=valid, other=0.0)
        b_im = tl.load(b_ptr + row * 2 + 1, mask=valid, other=0.0)
        if COLUMN:
            # y[n] = d[n]·x[n], then x'[m] = Σ_n [p[n] = m]·y[n]  (tile[m, n]).
            y_re = d_re * x_re - d_im * x_im
            y_im = d_re * x_im + d_im * x_re
            hit = idx[None, :] == lanes[:, None]
            x_re = tl.sum(tl.where(hit, y_re[None, :], 0.0), axis=1)
            x_im = tl.sum(tl.where(hit, y_im[None, :], 0.0), axis=1)
        else:
            # g[m] = x[q[m]] = Σ_n [q[m] = n]·x[n]  (tile[m, n]), then x'[m] = d[m]·g[m].
            hit = idx[:, None] == lanes[None, :]
            g_re = tl.sum(tl.where(hit, x_re[None, :], 0.0), axis=1)
            g_im = tl.sum(tl.where(hit, x_im[None, :], 0.0), axis=1)
            x_re = d_re * g_re - d_im * g_im
            x_im = d_re * g_im + d_im * g_re
        x_re = x_re + b_re
        x_im = x_im + b_im
        tl.store(out_ptr + row * 2, x_re, mask=valid)
        tl.store(out_ptr + row * 2 + 1, x_im, mask=valid)


def triton_states(
    p: torch.Tensor,
    d: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor,
    orientation: str,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """States ``x_1..x_L`` of the PD recurrence with the Triton kernel (complex64 only).

    Args:
        p: int64 (B, L, N) indices (already range-checked).
        d, b: complex64 (B, L, N).
        x0: complex64 (B, N).
        orientation: ``"column"`` or ``"row"``.
        out: optional float32 (B, L, N, 2) buffer to write into (the tests pass a NaN-poisoned one).

    Returns:
        complex64 (B, L, N), a view of ``out``.
    """
    batch, length, size = b.shape
    p = p.contiguous()
    d_real = torch.view_as_real(d.contiguous())
    b_real = torch.view_as_real(b.contiguous())
    x0_real = torch.view_as_real(x0.contiguous())
    if out is None:
        out = torch.empty((batch, length, size, 2), dtype=torch.float32, device=b.device)
    block = max(triton.next_power_of_2(size), 2)
    num_warps = 1 if block <= 32 else (4 if block <= 128 else 8)
    _pd_scan_fwd_kernel[(batch,)](
        p,
        d_real,
        b_real,
        x0_real,
        out,
        length,
        size,
        COLUMN=orientation == "column",
        BLOCK_N=block,
        num_warps=num_warps,
    )
    return torch.view_as_complex(out)
