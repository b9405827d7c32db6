"""Triton packed low-bit matmul: ``y = s ⊙ (x · (C − z)ᵀ) + bias`` with codes unpacked in registers.

Each program owns a ``(BLOCK_M, BLOCK_N)`` output tile and walks the int32 words of its rows in
blocks of ``BLOCK_W``. A word block is loaded once; for every shift ``i`` (a ``tl.static_range``)
the codes ``(w >> i·b) & mask`` form the ``(BLOCK_N, BLOCK_W)`` weight slice for K indices
``i·Wd + j`` (planar layout, contiguous in K), which is offset, converted and ``tl.dot``-ed with the
matching ``x`` slice into an fp32 accumulator. A 3-bit weight adds its 1-bit high plane with
factor 4 in a second loop. Pointer arithmetic and masks only (no block pointers), so the kernel
runs under ``TRITON_INTERPRET=1``.

Imported lazily by :mod:`paretoq.ops`: importing ``paretoq`` never imports triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from neurips25_core.device import triton_interpret


def _configs() -> list[triton.Config]:
    if triton_interpret() or not torch.cuda.is_available():
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_W": 16}, num_warps=1)]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_W": bw}, num_warps=nw, num_stages=ns)
        for bm, bn, bw, nw, ns in [
            (16, 32, 32, 4, 3),
            (16, 64, 32, 4, 3),
            (16, 64, 64, 4, 4),
            (16, 128, 32, 4, 3),
            (32, 64, 32, 4, 3),
            (64, 64, 32, 4, 3),
            (64, 128, 32, 8, 3),
            (128, 128, 32, 8, 3),
        ]
    ]


@triton.jit
def _plane_accumulate(
    acc,
    x_ptr,
    q_ptr,
    offs_m,
    offs_n,
    M,
    N,
    K,
    WD,
    stride_xm,
    stride_xk,
    stride_qn,
    PLANE_BITS: tl.constexpr,
    ZERO: tl.constexpr,
    FACTOR: tl.constexpr,
    X_IS_FP32: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    V: tl.constexpr = 32 // PLANE_BITS
    MASK: tl.constexpr = (1 << PLANE_BITS) - 1
    offs_w = tl.arange(0, BLOCK_W)
    m_ok = offs_m[:, None] < M
    n_ok = offs_n[:, None] < N
    for w0 in range(0, WD, BLOCK_W):
        j = w0 + offs_w
        j_ok = j[None, :] < WD
        words = tl.load(q_ptr + offs_n[:, None] * stride_qn + j[None, :], mask=n_ok & j_ok, other=0)
        for i in tl.static_range(V):
            k = i * WD + j
            x = tl.load(
                x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                mask=m_ok & j_ok & (k[None, :] < K),
                other=0.0,
            )
            # int32 >> is arithmetic: mask after the shift.
            codes = ((words >> (i * PLANE_BITS)) & MASK).to(tl.float32) - ZERO
            if FACTOR != 1.0:
                codes = codes * FACTOR
            if X_IS_FP32:
                acc += tl.dot(x, tl.trans(codes), input_precision="ieee")
            else:
                acc += tl.dot(x, tl.trans(codes.to(x.dtype)))
    return acc


@triton.autotune(configs=_configs(), key=["M", "N", "K", "BITS_LO", "HAS_HI"])
@triton.jit
def _packed_matmul_kernel(
    x_ptr,
    qlo_ptr,
    qhi_ptr,
    scale_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    K,
    WD_LO,
    WD_HI,
    stride_xm,
    stride_xk,
    stride_qlo,
    stride_qhi,
    stride_om,
    stride_on,
    BITS_LO: tl.constexpr,
    ZERO_LO: tl.constexpr,
    HAS_HI: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    X_IS_FP32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = _plane_accumulate(
        acc, x_ptr, qlo_ptr, offs_m, offs_n, M, N, K, WD_LO, stride_xm, stride_xk, stride_qlo,
        BITS_LO, ZERO_LO, 1.0, X_IS_FP32, BLOCK_W,
    )  # fmt: skip
    if HAS_HI:
        # 3-bit: the high bit, c = lo + 4·hi, offsets 2 + 4·0.5 = 4.
        acc = _plane_accumulate(
            acc, x_ptr, qhi_ptr, offs_m, offs_n, M, N, K, WD_HI, stride_xm, stride_xk, stride_qhi,
            1, 0.5, 4.0, X_IS_FP32, BLOCK_W,
        )  # fmt: skip
    n_mask = offs_n < N
    scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    acc = acc * scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out_mask = (offs_m[:, None] < M) & n_mask[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
        acc.to(out_ptr.dtype.element_ty),
        mask=out_mask,
    )


def packed_matmul_triton(
    x: torch.Tensor,
    planes: list[torch.Tensor],
    scale: torch.Tensor,
    plane_specs: tuple[tuple[int, float, float], ...],
    in_features: int,
    bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch the packed matmul on ``x`` of shape ``(M, K)``; returns ``(M, N)`` in ``x``'s dtype."""
    m, k = x.shape
    n = scale.shape[0]
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    lo = planes[0].contiguous()
    hi = planes[1].contiguous() if len(planes) > 1 else lo
    scale = scale.contiguous()
    bits_lo, zero_lo, _ = plane_specs[0]

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

    _packed_matmul_kernel[grid](
        x, lo, hi, scale, bias if bias is not None else scale, out,
        m, n, k, lo.shape[1], hi.shape[1],
        x.stride(0), x.stride(1), lo.stride(0), hi.stride(0), out.stride(0), out.stride(1),
        BITS_LO=bits_lo, ZERO_LO=float(zero_lo), HAS_HI=len(planes) > 1, HAS_BIAS=bias is not None,
        X_IS_FP32=x.dtype == torch.float32,
    )  # fmt: skip
    return out
