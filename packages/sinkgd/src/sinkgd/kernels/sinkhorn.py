"""Triton kernels for SR-Sinkhorn: one fused kernel per iteration, one kernel for the output.

Like the torch path (:mod:`sinkgd.sinkhorn`), the kernels keep the iterate implicit as
``diag(r) · G · diag(c)``. One iteration is one launch of :func:`_sinkhorn_iteration_kernel`; each
program owns ``BLOCK_M`` rows of one matrix of the batch and

1. streams its rows, applying the column scale ``c`` on load, and reduces ``Σ_j (G_ij c_j)²``,
2. turns the row sums into the new row scale ``r`` (the clamped normalisation to √N),
3. streams its rows again, applying ``r``, and ``atomic_add``s its part of the next column sums
   of squares ``Σ_i (r_i G_ij)²`` into an ``(n,)`` accumulator (zeroed every iteration).

The column scale update (an ``(n,)`` vector op, with an all-reduce in between under FSDP2) runs in
torch between launches. The gradient is read twice per iteration and never written until
:func:`_scale_output_kernel` writes ``r_i G_ij c_j`` once: ``2L + 1`` reads and one write, against
≈6 reads/writes per iteration when every normalisation is materialised.

The column sums are accumulated with atomics, so they are order-dependent in fp32: compare with a
tolerance, not bitwise. Under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors (slowly).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from neurips25_core.device import triton_interpret

__all__ = ["sr_sinkhorn_triton"]


@triton.jit
def _sinkhorn_iteration_kernel(
    g_ptr,
    r_ptr,
    c_ptr,
    col_sq_ptr,
    M,
    N,
    stride_gb,
    stride_gm,
    stride_gn,
    sqrt_n,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    batch = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    g_base = g_ptr + batch.to(tl.int64) * stride_gb + rows.to(tl.int64)[:, None] * stride_gm
    c_base = c_ptr + batch.to(tl.int64) * N
    # 1. row sums of squares of G·diag(c)
    row_sq = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < N
        mask = row_mask[:, None] & col_mask[None, :]
        g = tl.load(g_base + cols[None, :] * stride_gn, mask=mask, other=0.0).to(tl.float32)
        c = tl.load(c_base + cols, mask=col_mask, other=0.0)
        gc = g * c[None, :]
        row_sq += tl.sum(gc * gc, axis=1)
    # 2. the row normalisation: r ← r·√N / max(r·‖row‖, eps); zero rows stay zero
    r_ptrs = r_ptr + batch.to(tl.int64) * M + rows
    r_old = tl.load(r_ptrs, mask=row_mask, other=0.0)
    norm = r_old * tl.sqrt(row_sq)
    r_new = tl.where(row_sq > 0, r_old * sqrt_n / tl.maximum(norm, eps), 0.0)
    tl.store(r_ptrs, r_new, mask=row_mask)
    # 3. this block's part of the next column sums of squares of diag(r)·G
    col_base = col_sq_ptr + batch.to(tl.int64) * N
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_mask = cols < N
        mask = row_mask[:, None] & col_mask[None, :]
        g = tl.load(g_base + cols[None, :] * stride_gn, mask=mask, other=0.0).to(tl.float32)
        gr = g * r_new[:, None]
        tl.atomic_add(col_base + cols, tl.sum(gr * gr, axis=0), mask=col_mask)


@triton.jit
def _scale_output_kernel(
    g_ptr,
    r_ptr,
    c_ptr,
    out_ptr,
    M,
    N,
    stride_gb,
    stride_gm,
    stride_gn,
    stride_ob,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    b64 = batch.to(tl.int64)
    g = tl.load(
        g_ptr
        + b64 * stride_gb
        + rows.to(tl.int64)[:, None] * stride_gm
        + cols[None, :] * stride_gn,
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    r = tl.load(r_ptr + b64 * M + rows, mask=row_mask, other=0.0)
    c = tl.load(c_ptr + b64 * N + cols, mask=col_mask, other=0.0)
    out = g * r[:, None] * c[None, :]
    tl.store(
        out_ptr
        + b64 * stride_ob
        + rows.to(tl.int64)[:, None] * stride_om
        + cols[None, :] * stride_on,
        out.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def _block_sizes(m: int, n: int) -> tuple[int, int]:
    if triton_interpret():
        # The interpreter runs one program at a time through numpy: few, large-ish blocks.
        return 16, 64
    return 4, min(1024, triton.next_power_of_2(max(n, 16)))


def sr_sinkhorn_triton(
    grad: torch.Tensor,
    num_iters: int = 5,
    eps: float = 1e-8,
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """SR-Sinkhorn with the fused Triton iteration kernel (no argument checks; see :func:`sinkgd.sr_sinkhorn`).

    Args:
        grad: ``(..., m, n)`` float32/bfloat16/float16 gradient on CUDA (or CPU under the interpreter).
        num_iters: L ≥ 1.
        eps: lower clamp of the norms.
        out_dtype: dtype of the result (default ``grad.dtype``).
        out: optional preallocated ``(..., m, n)`` output (written entirely).

    Returns:
        ``(..., m, n)`` normalised gradient.
    """
    *lead, m, n = grad.shape
    batch = math.prod(lead)
    g3 = grad.reshape(batch, m, n)
    if out is None:
        out = torch.empty(grad.shape, dtype=out_dtype or grad.dtype, device=grad.device)
    if out.numel() == 0:
        return out
    o3 = out.view(batch, m, n)
    r = torch.ones(batch, m, dtype=torch.float32, device=grad.device)
    c = torch.ones(batch, n, dtype=torch.float32, device=grad.device)
    col_sq = torch.empty(batch, n, dtype=torch.float32, device=grad.device)
    block_m, block_n = _block_sizes(m, n)
    grid = (triton.cdiv(m, block_m), batch)
    sqrt_m, sqrt_n = math.sqrt(m), math.sqrt(n)
    for _ in range(num_iters):
        col_sq.zero_()
        _sinkhorn_iteration_kernel[grid](
            g3, r, c, col_sq, m, n, *g3.stride(), sqrt_n, eps, BLOCK_M=block_m, BLOCK_N=block_n
        )
        norm = c * col_sq.sqrt()
        c = torch.where(col_sq > 0, c * sqrt_m / norm.clamp_min(eps), torch.zeros_like(c))
    out_block_m, out_block_n = (16, 64) if triton_interpret() else (32, 128)
    out_grid = (triton.cdiv(m, out_block_m), triton.cdiv(n, out_block_n), batch)
    _scale_output_kernel[out_grid](
        g3, r, c, o3, m, n, *g3.stride(), *o3.stride(), BLOCK_M=out_block_m, BLOCK_N=out_block_n
    )
    return out
