"""Triton PD scan kernels: the state of one sequence lives in registers, complex as float32 pairs.

Complex numbers travel as interleaved float32 pairs (``torch.view_as_real``). Each step applies
``x ← A_t x + b_t``:

* column orientation, ``x'[m] = Σ_{n: p[n] = m} d[n]·x[n]``: a scatter-add, written as a masked
  row sum over an (N, N) register tile, ``x'[m] = Σ_n [p[n] = m]·y[n]``. O(N²) compare-selects per
  step in registers, fine up to N ≈ 128, and collisions (merges) add correctly without atomics;
* row orientation, ``x'[m] = d[m]·x[q[m]]``: the same masked sum with the roles swapped (a gather).

Two schedules:

* ``chunk=None``: one program per sequence walks all L steps (``backend="triton"``);
* chunked three-phase scan (``backend="triton_chunked"``): (1) per (sequence, chunk), compose the
  chunk's transitions into one PD map — PD matrices are closed under products, so this stays
  O(N) in memory — and its zero-start offset; (2) per sequence, scan the L/chunk summaries for each
  chunk's incoming state; (3) per (sequence, chunk), replay the chunk from that state, writing the
  states. ``tl.associative_scan`` cannot express the cross-lane gather of the combine, hence the
  explicit phases.

The backward of one orientation is the reverse-time scan of the other (see :mod:`pdssm.ops`), so
the same kernels serve forward and backward.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["triton_states"]


@triton.jit
def _apply(idx, d_re, d_im, x_re, x_im, lanes, COLUMN: tl.constexpr):
    """``A x`` for one PD transition held in registers (masked-sum scatter or gather)."""
    if COLUMN:
        # y[n] = d[n]·x[n], then x'[m] = Σ_n [p[n] = m]·y[n]  (tile[m, n]).
        y_re = d_re * x_re - d_im * x_im
        y_im = d_re * x_im + d_im * x_re
        hit = idx[None, :] == lanes[:, None]
        out_re = tl.sum(tl.where(hit, y_re[None, :], 0.0), axis=1)
        out_im = tl.sum(tl.where(hit, y_im[None, :], 0.0), axis=1)
    else:
        # g[m] = x[q[m]] = Σ_n [q[m] = n]·x[n]  (tile[m, n]), then x'[m] = d[m]·g[m].
        hit = idx[:, None] == lanes[None, :]
        g_re = tl.sum(tl.where(hit, x_re[None, :], 0.0), axis=1)
        g_im = tl.sum(tl.where(hit, x_im[None, :], 0.0), axis=1)
        out_re = d_re * g_re - d_im * g_im
        out_im = d_re * g_im + d_im * g_re
    return out_re, out_im


@triton.jit
def _pd_scan_fwd_kernel(
    p_ptr,  # int64 (B, L, N)
    d_ptr,  # float32 (B, L, N, 2)
    b_ptr,  # float32 (B, L, N, 2)
    init_ptr,  # float32 (B, C, N, 2): the state entering each chunk
    out_ptr,  # float32 (B, L, N, 2)
    length,
    size,
    chunk,
    num_chunks,
    COLUMN: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Grid (B, C): program (s, c) runs time steps [c·chunk, (c+1)·chunk) of sequence s."""
    seq = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    valid = lanes < size
    init = ((seq * num_chunks + part) * size + lanes) * 2
    x_re = tl.load(init_ptr + init, mask=valid, other=0.0)
    x_im = tl.load(init_ptr + init + 1, mask=valid, other=0.0)
    start = part * chunk
    stop = tl.minimum(start + chunk, length)
    for t in range(start, stop):
        row = (seq * length + t) * size + lanes
        idx = tl.load(p_ptr + row, mask=valid, other=-1)
        d_re = tl.load(d_ptr + row * 2, mask=valid, other=0.0)
        d_im = tl.load(d_ptr + row * 2 + 1, mask=valid, other=0.0)
        x_re, x_im = _apply(idx, d_re, d_im, x_re, x_im, lanes, COLUMN)
        x_re += tl.load(b_ptr + row * 2, mask=valid, other=0.0)
        x_im += tl.load(b_ptr + row * 2 + 1, mask=valid, other=0.0)
        tl.store(out_ptr + row * 2, x_re, mask=valid)
        tl.store(out_ptr + row * 2 + 1, x_im, mask=valid)


@triton.jit
def _chunk_summary_kernel(
    p_ptr,  # int64 (B, L, N)
    d_ptr,  # float32 (B, L, N, 2)
    b_ptr,  # float32 (B, L, N, 2)
    comp_p_ptr,  # int64 (B, C, N): the chunk's composed one-hot factor
    comp_d_ptr,  # float32 (B, C, N, 2): the chunk's composed diagonal
    comp_b_ptr,  # float32 (B, C, N, 2): the chunk's state from a zero start
    length,
    size,
    chunk,
    num_chunks,
    COLUMN: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Phase 1: compose each chunk's transitions into one PD map (p, d) and its offset b."""
    seq = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    valid = lanes < size
    cp = lanes.to(tl.int64)
    cd_re = tl.where(valid, 1.0, 0.0)
    cd_im = tl.zeros([BLOCK_N], dtype=tl.float32)
    y_re = tl.zeros([BLOCK_N], dtype=tl.float32)
    y_im = tl.zeros([BLOCK_N], dtype=tl.float32)
    start = part * chunk
    stop = tl.minimum(start + chunk, length)
    for t in range(start, stop):
        row = (seq * length + t) * size + lanes
        idx = tl.load(p_ptr + row, mask=valid, other=-1)
        d_re = tl.load(d_ptr + row * 2, mask=valid, other=0.0)
        d_im = tl.load(d_ptr + row * 2 + 1, mask=valid, other=0.0)
        y_re, y_im = _apply(idx, d_re, d_im, y_re, y_im, lanes, COLUMN)
        y_re += tl.load(b_ptr + row * 2, mask=valid, other=0.0)
        y_im += tl.load(b_ptr + row * 2 + 1, mask=valid, other=0.0)
        if COLUMN:
            # composite ← A_t ∘ composite: p = p_t[cp], d = d_t[cp]·cd (gathers at cp).
            hit = cp[:, None] == lanes[None, :]
            g_p = tl.sum(tl.where(hit, idx[None, :], 0), axis=1)
            g_re = tl.sum(tl.where(hit, d_re[None, :], 0.0), axis=1)
            g_im = tl.sum(tl.where(hit, d_im[None, :], 0.0), axis=1)
            new_re = g_re * cd_re - g_im * cd_im
            new_im = g_re * cd_im + g_im * cd_re
            cp = g_p
        else:
            # q = cq[q_t], d = d_t·cd[q_t] (gathers at q_t).
            hit = idx[:, None] == lanes[None, :]
            g_p = tl.sum(tl.where(hit, cp[None, :], 0), axis=1)
            g_re = tl.sum(tl.where(hit, cd_re[None, :], 0.0), axis=1)
            g_im = tl.sum(tl.where(hit, cd_im[None, :], 0.0), axis=1)
            new_re = d_re * g_re - d_im * g_im
            new_im = d_re * g_im + d_im * g_re
            cp = g_p
        cd_re = new_re
        cd_im = new_im
    base = (seq * num_chunks + part) * size + lanes
    tl.store(comp_p_ptr + base, cp, mask=valid)
    tl.store(comp_d_ptr + base * 2, cd_re, mask=valid)
    tl.store(comp_d_ptr + base * 2 + 1, cd_im, mask=valid)
    tl.store(comp_b_ptr + base * 2, y_re, mask=valid)
    tl.store(comp_b_ptr + base * 2 + 1, y_im, mask=valid)


@triton.jit
def _chunk_carry_kernel(
    comp_p_ptr,  # int64 (B, C, N)
    comp_d_ptr,  # float32 (B, C, N, 2)
    comp_b_ptr,  # float32 (B, C, N, 2)
    x0_ptr,  # float32 (B, N, 2)
    carry_ptr,  # float32 (B, C, N, 2): the state entering each chunk
    size,
    num_chunks,
    COLUMN: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Phase 2: a sequential scan over the chunk summaries gives each chunk's incoming state."""
    seq = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    valid = lanes < size
    x_re = tl.load(x0_ptr + (seq * size + lanes) * 2, mask=valid, other=0.0)
    x_im = tl.load(x0_ptr + (seq * size + lanes) * 2 + 1, mask=valid, other=0.0)
    for c in range(num_chunks):
        base = (seq * num_chunks + c) * size + lanes
        tl.store(carry_ptr + base * 2, x_re, mask=valid)
        tl.store(carry_ptr + base * 2 + 1, x_im, mask=valid)
        idx = tl.load(comp_p_ptr + base, mask=valid, other=-1)
        d_re = tl.load(comp_d_ptr + base * 2, mask=valid, other=0.0)
        d_im = tl.load(comp_d_ptr + base * 2 + 1, mask=valid, other=0.0)
        x_re, x_im = _apply(idx, d_re, d_im, x_re, x_im, lanes, COLUMN)
        x_re += tl.load(comp_b_ptr + base * 2, mask=valid, other=0.0)
        x_im += tl.load(comp_b_ptr + base * 2 + 1, mask=valid, other=0.0)


def default_chunk(length: int) -> int:
    """≈ √L rounded up to a power of two (at least 4): balances phase 2's L/chunk steps against
    the chunk length each program of phases 1 and 3 walks."""
    return max(4, triton.next_power_of_2(math.isqrt(max(length - 1, 0)) + 1))


def triton_states(
    p: torch.Tensor,
    d: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor,
    orientation: str,
    out: torch.Tensor | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """States ``x_1..x_L`` of the PD recurrence with the Triton kernels (complex64 only).

    With ``chunk=None`` one program per sequence walks all L steps. With a chunk length, the
    three-phase scan runs: (1) every (sequence, chunk) program composes its chunk's transitions
    into one PD map and offset, (2) one program per sequence scans the L/chunk summaries for the
    state entering each chunk, (3) every (sequence, chunk) program replays its chunk from that
    state. About twice the work of the sequential kernel, with B·L/chunk-way parallelism.

    Args:
        p: int64 (B, L, N) indices (already range-checked).
        d, b: complex64 (B, L, N).
        x0: complex64 (B, N).
        orientation: ``"column"`` or ``"row"``.
        out: optional float32 (B, L, N, 2) buffer to write into (the tests pass a NaN-poisoned one).
        chunk: chunk length for the three-phase scan, or None for the sequential kernel.

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
    column = orientation == "column"
    if chunk is None or chunk >= length:
        _pd_scan_fwd_kernel[(batch, 1)](
            p,
            d_real,
            b_real,
            x0_real,
            out,
            length,
            size,
            length,
            1,
            COLUMN=column,
            BLOCK_N=block,
            num_warps=num_warps,
        )
        return torch.view_as_complex(out)
    num_chunks = triton.cdiv(length, chunk)
    comp_p = torch.empty((batch, num_chunks, size), dtype=torch.int64, device=b.device)
    comp_d = torch.empty((batch, num_chunks, size, 2), dtype=torch.float32, device=b.device)
    comp_b = torch.empty_like(comp_d)
    carry = torch.empty_like(comp_d)
    grid = (batch, num_chunks)
    _chunk_summary_kernel[grid](
        p,
        d_real,
        b_real,
        comp_p,
        comp_d,
        comp_b,
        length,
        size,
        chunk,
        num_chunks,
        COLUMN=column,
        BLOCK_N=block,
        num_warps=num_warps,
    )
    _chunk_carry_kernel[(batch,)](
        comp_p,
        comp_d,
        comp_b,
        x0_real,
        carry,
        size,
        num_chunks,
        COLUMN=column,
        BLOCK_N=block,
        num_warps=num_warps,
    )
    _pd_scan_fwd_kernel[grid](
        p,
        d_real,
        b_real,
        carry,
        out,
        length,
        size,
        chunk,
        num_chunks,
        COLUMN=column,
        BLOCK_N=block,
        num_warps=num_warps,
    )
    return torch.view_as_complex(out)
