"""Triton kernels for codebook matmuls (pointer arithmetic, fp32 accumulation).

- ``_dequant_kernel``: tile of ``Ŵ`` from codes, codebooks and scales (then ``torch.matmul``).
- ``_dequant_gemm_kernel``: fused dequantize-GEMM, the ``Ŵ`` tile rebuilt in registers and fed to
  ``tl.dot``.
- ``_psumbook_build_kernel``: the Psumbook ``P[n, j, k, c] = ⟨x[n, jv:(j+1)v], B_k[c]⟩`` in global
  memory (fp32).
- ``_psumbook_gather_kernel``: per (row block, token block), codes gather and add entries of P,
  the sum over each scale group is scaled once, no atomics (deterministic).
- ``_psumbook_splitk_kernel``: the fused kernel of ``codegemm.cu``: per (row block, K-slice,
  token), build the slice's table in registers, gather it with ``tl.gather``, scale once, and
  ``tl.atomic_add`` into a zeroed fp32 output (split-K; summation order varies run to run).

Imported lazily by :mod:`codegemm.ops`; never at package import.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = [
    "dequant_gemm_triton",
    "dequantize_triton",
    "psumbook_build_triton",
    "psumbook_matmul_triton",
]


@triton.jit
def _dequant_kernel(
    codes_ptr,
    codebooks_ptr,
    scales_ptr,
    out_ptr,
    M,
    K,
    num_vectors,
    num_groups,
    group_size,
    m: tl.constexpr,
    C: tl.constexpr,
    v: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    vec = cols // v
    lane = cols % v
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    code_base = rows[:, None].to(tl.int64) * (num_vectors * m) + vec[None, :] * m
    for k in tl.static_range(m):
        code = tl.load(codes_ptr + code_base + k, mask=mask, other=0).to(tl.int32)
        acc += tl.load(codebooks_ptr + (k * C + code) * v + lane[None, :], mask=mask, other=0.0).to(
            tl.float32
        )
    scale = tl.load(
        scales_ptr + rows[:, None].to(tl.int64) * num_groups + cols[None, :] // group_size,
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    out = acc * scale
    tl.store(
        out_ptr + rows[:, None].to(tl.int64) * K + cols[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _dequant_gemm_kernel(
    x_ptr,
    codes_ptr,
    codebooks_ptr,
    scales_ptr,
    out_ptr,
    N,
    M,
    K,
    num_vectors,
    num_groups,
    group_size,
    stride_xn,
    stride_on,
    m: tl.constexpr,
    C: tl.constexpr,
    v: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tokens = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        wmask = (rows[:, None] < M) & (cols[None, :] < K)
        vec = cols // v
        lane = cols % v
        w = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        code_base = rows[:, None].to(tl.int64) * (num_vectors * m) + vec[None, :] * m
        for k in tl.static_range(m):
            code = tl.load(codes_ptr + code_base + k, mask=wmask, other=0).to(tl.int32)
            w += tl.load(
                codebooks_ptr + (k * C + code) * v + lane[None, :], mask=wmask, other=0.0
            ).to(tl.float32)
        scale = tl.load(
            scales_ptr + rows[:, None].to(tl.int64) * num_groups + cols[None, :] // group_size,
            mask=wmask,
            other=0.0,
        ).to(tl.float32)
        w = w * scale
        xmask = (tokens[:, None] < N) & (cols[None, :] < K)
        xt = tl.load(
            x_ptr + tokens[:, None].to(tl.int64) * stride_xn + cols[None, :], mask=xmask, other=0.0
        )
        if IEEE:
            acc += tl.dot(xt.to(tl.float32), tl.trans(w), input_precision="ieee")
        else:
            acc += tl.dot(xt, tl.trans(w.to(xt.dtype)))
    omask = (tokens[:, None] < N) & (rows[None, :] < M)
    tl.store(
        out_ptr + tokens[:, None].to(tl.int64) * stride_on + rows[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=omask,
    )


@triton.jit
def _psumbook_build_kernel(
    x_ptr,
    codebooks_ptr,
    table_ptr,
    num_vectors,
    stride_xn,
    m: tl.constexpr,
    C: tl.constexpr,
    v: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    n = tl.program_id(0)
    pid_j = tl.program_id(1)
    vec = pid_j * BLOCK_J + tl.arange(0, BLOCK_J)
    vmask = vec < num_vectors
    centroid = tl.arange(0, C)
    for k in tl.static_range(m):
        acc = tl.zeros((BLOCK_J, C), dtype=tl.float32)
        for d in tl.static_range(v):
            xv = tl.load(
                x_ptr + n.to(tl.int64) * stride_xn + vec * v + d, mask=vmask, other=0.0
            ).to(tl.float32)
            bv = tl.load(codebooks_ptr + (k * C + centroid) * v + d).to(tl.float32)
            acc += xv[:, None] * bv[None, :]
        offs = ((n.to(tl.int64) * num_vectors + vec[:, None]) * m + k) * C + centroid[None, :]
        tl.store(table_ptr + offs, acc, mask=vmask[:, None])


@triton.jit
def _psumbook_gather_kernel(
    table_ptr,
    codes_ptr,
    scales_ptr,
    out_ptr,
    N,
    M,
    num_vectors,
    num_groups,
    stride_on,
    VECTORS_PER_GROUP: tl.constexpr,
    m: tl.constexpr,
    C: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tokens = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < M
    tmask = tokens < N
    mask = rmask[:, None] & tmask[None, :]
    token_base = tokens[None, :].to(tl.int64) * num_vectors
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for group in range(0, num_groups):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for jj in range(0, VECTORS_PER_GROUP):
            j = group * VECTORS_PER_GROUP + jj
            for k in tl.static_range(m):
                code = tl.load(
                    codes_ptr + (rows.to(tl.int64) * num_vectors + j) * m + k, mask=rmask, other=0
                )
                offs = ((token_base + j) * m + k) * C + code.to(tl.int64)[:, None]
                part += tl.load(table_ptr + offs, mask=mask, other=0.0)
        scale = tl.load(scales_ptr + rows.to(tl.int64) * num_groups + group, mask=rmask, other=0.0)
        acc += part * scale.to(tl.float32)[:, None]
    tl.store(
        out_ptr + tokens[None, :].to(tl.int64) * stride_on + rows[:, None],
        acc.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _psumbook_splitk_kernel(
    x_ptr,
    codes_ptr,
    codebooks_ptr,
    scales_ptr,
    out_ptr,
    M,
    num_vectors,
    num_groups,
    group_size,
    stride_xn,
    stride_on,
    m: tl.constexpr,
    C: tl.constexpr,
    v: tl.constexpr,
    TILE_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)
    VECTORS: tl.constexpr = TILE_K // v
    # table rows (sub-vector jj of the slice, codebook k), row index jj*m + k
    slot = tl.arange(0, VECTORS * m)
    vec = pid_k * VECTORS + slot // m
    book = slot % m
    centroid = tl.arange(0, C)
    table = tl.zeros((VECTORS * m, C), dtype=tl.float32)
    for d in tl.static_range(v):
        xv = tl.load(x_ptr + n * stride_xn + vec * v + d).to(tl.float32)
        bv = tl.load(codebooks_ptr + (book[:, None] * C + centroid[None, :]) * v + d).to(tl.float32)
        table += xv[:, None] * bv
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    code = tl.load(
        codes_ptr + (rows[None, :].to(tl.int64) * num_vectors + vec[:, None]) * m + book[:, None],
        mask=rmask[None, :],
        other=0,
    ).to(tl.int32)
    part = tl.sum(tl.gather(table, code, axis=1), axis=0)  # [BLOCK_M]
    # TILE_K divides g, so the whole slice shares one scale per row
    scale = tl.load(
        scales_ptr + rows.to(tl.int64) * num_groups + (pid_k * TILE_K) // group_size,
        mask=rmask,
        other=0.0,
    )
    tl.atomic_add(out_ptr + n * stride_on + rows, part * scale.to(tl.float32), mask=rmask)


def _pow2_at_least(n: int, low: int, high: int) -> int:
    return max(low, min(high, triton.next_power_of_2(max(n, 1))))


def dequantize_triton(
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    out: torch.Tensor | None = None,
    block_m: int = 32,
    block_k: int = 64,
) -> torch.Tensor:
    """``Ŵ [M, K]`` in ``dtype`` (or written into ``out``), one program per (row block, column block)."""
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    k = num_vectors * v
    if out is None:
        out = torch.empty(rows, k, dtype=dtype, device=codes.device)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(k, block_k))
    _dequant_kernel[grid](
        codes.contiguous(),
        codebooks.contiguous(),
        scales.contiguous(),
        out,
        rows,
        k,
        num_vectors,
        scales.shape[1],
        k // scales.shape[1],
        m=m,
        C=size,
        v=v,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
    )
    return out


def dequant_gemm_triton(
    x: torch.Tensor,
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    out: torch.Tensor | None = None,
    block_m: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """Fused dequantize-GEMM: x ``[N, K]`` -> ``[N, M]`` (x's dtype), fp32 accumulation."""
    n, k = x.shape
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    x = x.contiguous()
    if out is None:
        out = torch.empty(n, rows, dtype=x.dtype, device=x.device)
    block_n = _pow2_at_least(n, 16, 64)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(n, block_n))
    _dequant_gemm_kernel[grid](
        x,
        codes.contiguous(),
        codebooks.contiguous(),
        scales.contiguous(),
        out,
        n,
        rows,
        k,
        num_vectors,
        scales.shape[1],
        k // scales.shape[1],
        x.stride(0),
        out.stride(0),
        m=m,
        C=size,
        v=v,
        BLOCK_N=block_n,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
        IEEE=x.dtype == torch.float32,
    )
    return out


def psumbook_build_triton(
    x: torch.Tensor, codebooks: torch.Tensor, out: torch.Tensor | None = None, block_j: int = 16
) -> torch.Tensor:
    """The Psumbook of x ``[N, K]``: fp32 ``[N, K/v, m, C]``."""
    n, k = x.shape
    m, size, v = codebooks.shape
    num_vectors = k // v
    x = x.contiguous()
    if out is None:
        out = torch.empty(n, num_vectors, m, size, dtype=torch.float32, device=x.device)
    grid = (n, triton.cdiv(num_vectors, block_j))
    _psumbook_build_kernel[grid](
        x,
        codebooks.contiguous(),
        out,
        num_vectors,
        x.stride(0),
        m=m,
        C=size,
        v=v,
        BLOCK_J=block_j,
    )
    return out


def psumbook_matmul_triton(
    x: torch.Tensor,
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    out: torch.Tensor | None = None,
    table: torch.Tensor | None = None,
    block_m: int = 64,
    block_n: int | None = None,
) -> torch.Tensor:
    """Two-phase Psumbook GEMM: build P ``[N, K/v, m, C]``, then gather-accumulate; x ``[N, K]`` -> ``[N, M]``."""
    n, k = x.shape
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    groups = scales.shape[1]
    table = psumbook_build_triton(x, codebooks, out=table)
    if out is None:
        out = torch.empty(n, rows, dtype=x.dtype, device=x.device)
    if block_n is None:
        block_n = _pow2_at_least(n, 1, 16)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(n, block_n))
    _psumbook_gather_kernel[grid](
        table,
        codes.contiguous(),
        scales.contiguous(),
        out,
        n,
        rows,
        num_vectors,
        groups,
        out.stride(0),
        VECTORS_PER_GROUP=k // groups // v,
        m=m,
        C=size,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
    )
    return out


def psumbook_splitk_triton(
    x: torch.Tensor,
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    tile_k: int | None = None,
    block_m: int = 128,
) -> torch.Tensor:
    """Fused split-K Psumbook (the ``codegemm.cu`` design): x ``[N, K]`` -> ``[N, M]`` (x's dtype).

    Grid (row blocks, K/tile_k, N). ``tile_k`` (a power of two, a multiple of v, dividing g;
    default: the official K_TILE_SIZE 32, halved until it divides g); m must be a power of two
    (1 or 2 in the official format).
    """
    n, k = x.shape
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    groups = scales.shape[1]
    group = k // groups
    if tile_k is None:
        tile_k = 32
        while tile_k > v and group % tile_k:
            tile_k //= 2
    if m & (m - 1):
        raise ValueError(
            f"codes: the split-K kernel needs a power-of-two number of codebooks, got m={m}"
        )
    if tile_k & (tile_k - 1) or tile_k % v or group % tile_k:
        raise ValueError(
            f"tile_k: expected a power of two, a multiple of v={v} and a divisor of g={group}, got {tile_k}"
        )
    out = torch.zeros(n, rows, dtype=torch.float32, device=x.device)
    x = x.contiguous()
    grid = (triton.cdiv(rows, block_m), k // tile_k, n)
    _psumbook_splitk_kernel[grid](
        x,
        codes.contiguous(),
        codebooks.contiguous(),
        scales.contiguous(),
        out,
        rows,
        num_vectors,
        groups,
        group,
        x.stride(0),
        out.stride(0),
        m=m,
        C=size,
        v=v,
        TILE_K=tile_k,
        BLOCK_M=block_m,
    )
    return out.to(x.dtype)
