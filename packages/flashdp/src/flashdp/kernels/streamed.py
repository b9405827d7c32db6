"""The streamed two-phase Triton kernels (deterministic; run under ``TRITON_INTERPRET=1``).

Per chunk of ``b_c`` samples:

1. ``_flashdp_wgrad_tile_kernel`` (grid: tiles × b_c) forms the fp32 tile of ``Gᵢᵀ Xᵢ`` over T with
   ``tl.dot``, writes it to ``scratch[b_c, M, N]`` and its Σ tile² to ``partial[b_c, tiles]``
   (one slot per program: no atomics, so the result is bitwise reproducible).
2. torch turns ``partial`` into ``cᵢ = min(1, C / (‖gᵢ‖ + ξ))``.
3. ``_flashdp_clip_accumulate_kernel`` adds ``Σᵢ cᵢ scratchᵢ`` into the (M, N) fp32 output, the
   samples summed in a fixed order.

``b_c`` comes from a byte budget (default 2·|W| in fp32). Per-sample data moves twice (write,
read), against three times for materialise-then-clip.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from neurips25_core.device import triton_interpret

from ..clipping import samples_per_chunk
from ..reference import flatten_linear_inputs


@triton.jit
def _flashdp_wgrad_tile_kernel(
    x_ptr,
    g_ptr,
    scratch_ptr,
    partial_ptr,
    T,
    M,
    N,
    tiles_n,
    tiles,
    stride_xb,
    stride_xt,
    stride_gb,
    stride_gt,
    BLOCK_T: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOW_PRECISION_DOT: tl.constexpr,
):
    tile = tl.program_id(0)
    sample = tl.program_id(1)
    pm = tile // tiles_n
    pn = tile % tiles_n
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rt = tl.arange(0, BLOCK_T)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        t = t0 + rt
        g = tl.load(
            g_ptr + sample * stride_gb + t[:, None] * stride_gt + rm[None, :],
            mask=(t[:, None] < T) & (rm[None, :] < M),
            other=0.0,
        )
        x = tl.load(
            x_ptr + sample * stride_xb + t[:, None] * stride_xt + rn[None, :],
            mask=(t[:, None] < T) & (rn[None, :] < N),
            other=0.0,
        )
        if LOW_PRECISION_DOT:
            acc += tl.dot(tl.trans(g), x)
        else:
            acc += tl.dot(tl.trans(g.to(tl.float32)), x.to(tl.float32), input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(scratch_ptr + sample * M * N + rm[:, None] * N + rn[None, :], acc, mask=mask)
    tl.store(partial_ptr + sample * tiles + tile, tl.sum(tl.sum(acc * acc, axis=1), axis=0))


@triton.jit
def _flashdp_clip_accumulate_kernel(
    scratch_ptr, factor_ptr, out_ptr, samples, MN, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(out_ptr + offs, mask=mask, other=0.0)
    for s in range(0, samples):
        c = tl.load(factor_ptr + s)
        acc += c * tl.load(scratch_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, acc, mask=mask)


def clipped_weight_grad_streamed(
    x: torch.Tensor,
    grad_out: torch.Tensor,
    max_norm: float,
    eps: float = 1e-6,
    chunk_bytes: int | None = None,
    norms_only: bool = False,
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σᵢ cᵢ Gᵢᵀ Xᵢ, ‖Gᵢᵀ Xᵢ‖)``: (M, N) fp32 and (B,) fp32 through the streamed kernels.

    Args:
        x: (B, T, N) fp32/bf16/fp16 (2-D: T = 1; more dims flatten).
        grad_out: (B, T, M), same dtype.
        max_norm: C.
        eps: ξ.
        chunk_bytes: scratch budget (default 2·|W| fp32 bytes).
        norms_only: skip phase 2 (for ``per_sample_norms``).
        block: tile size (default 16 under the interpreter, 64 on a GPU).
    """
    if torch.float64 in (x.dtype, grad_out.dtype):
        raise TypeError(
            "x: the triton backend takes fp32/bf16/fp16, got float64 (use backend='torch')"
        )
    if x.dtype != grad_out.dtype:
        grad_out = grad_out.to(x.dtype)
    x3, g3 = flatten_linear_inputs(x, grad_out)
    interp = triton_interpret()
    if interp and x3.dtype != torch.float32:
        x3, g3 = x3.float(), g3.float()  # the interpreter has no bf16 tl.dot
    x3, g3 = x3.contiguous(), g3.contiguous()
    b, t, n = x3.shape
    m = g3.shape[-1]
    bm = bn = block or (16 if interp else 64)
    bt = 16 if interp else 32
    tiles_n = triton.cdiv(n, bn)
    tiles = triton.cdiv(m, bm) * tiles_n
    step = samples_per_chunk(m, n, b, chunk_bytes)
    out = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    norms = torch.empty(b, dtype=torch.float32, device=x.device)
    scratch = torch.empty(step, m, n, dtype=torch.float32, device=x.device)
    partial = torch.empty(step, tiles, dtype=torch.float32, device=x.device)
    low = x3.dtype in (torch.bfloat16, torch.float16)
    elementwise = 256 if interp else 1024
    for start in range(0, b, step):
        count = min(step, b - start)
        _flashdp_wgrad_tile_kernel[(tiles, count)](
            x3[start:],
            g3[start:],
            scratch,
            partial,
            t,
            m,
            n,
            tiles_n,
            tiles,
            x3.stride(0),
            x3.stride(1),
            g3.stride(0),
            g3.stride(1),
            BLOCK_T=bt,
            BLOCK_M=bm,
            BLOCK_N=bn,
            LOW_PRECISION_DOT=low,
        )
        chunk_norms = partial[:count].sum(1).sqrt()
        norms[start : start + count] = chunk_norms
        if norms_only:
            continue
        factors = (max_norm / (chunk_norms + eps)).clamp(max=1.0).contiguous()
        _flashdp_clip_accumulate_kernel[(triton.cdiv(m * n, elementwise),)](
            scratch, factors, out, count, m * n, BLOCK=elementwise
        )
    return out, norms
