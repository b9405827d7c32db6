"""Triton kernel of ``expert_mix``: ``y = scaling · (g ⊗ h).reshape(T, N·r) @ B̂`` in one pass.

``B̂ = B.permute(0, 2, 1).reshape(N·r, out)`` is never materialised: the kernel walks the fused
inner dimension ``K = N·r`` in tiles of ``BLOCK_K = 16`` (``tl.dot`` needs K ≥ 16), and for the
lanes ``k`` of a tile loads ``g[t, k // r]`` and ``h[t, k % r]``, forms their product ``g ⊗ h`` in
registers and reads ``B[k // r, o, k % r]`` straight from the ``[N, out, r]`` parameter. Lanes past
``K`` are masked loads of 0, so any ``N·r`` (8, 12, 20, ...) is padded to a multiple of 16 without
a copy. Every operand is upcast to float32 before ``tl.dot`` (the interpreter has no bf16 dot) and
accumulated in float32; float32 inputs use IEEE products (``input_precision="ieee"``, no TF32), so
the kernel meets the float32 tolerance on a GPU as under the interpreter. The result is scaled and
written in the output buffer's dtype.

The backward is not a kernel: it is the torch backward of the same identity (``lope.ops``), as
the issue specifies; its two GEMMs (``grad_out @ B̂ᵀ`` and ``(g ⊗ h)ᵀ @ grad_out``) are already
single cuBLAS calls.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["expert_mix_triton"]

BLOCK_K = 16


def _configs() -> list[triton.Config]:
    # One config (the project's rule for the interpreter, and no autotuning cost on a GPU):
    # 64×64 output tiles, K in steps of 16.
    return [triton.Config({"BLOCK_T": 64, "BLOCK_O": 64}, num_warps=4, num_stages=2)]


@triton.autotune(configs=_configs(), key=["T", "OUT", "K"])
@triton.jit
def _expert_mix_kernel(
    h_ptr,  # [T, r]
    g_ptr,  # [T, N]
    b_ptr,  # [N, out, r]
    y_ptr,  # [T, out]
    T,
    OUT,
    R,
    K,  # N·r
    scaling,
    stride_ht,
    stride_hr,
    stride_gt,
    stride_gn,
    stride_bn,
    stride_bo,
    stride_br,
    stride_yt,
    stride_yo,
    PRECISION: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_O: tl.constexpr,
):
    """Grid ``(cdiv(T, BLOCK_T), cdiv(OUT, BLOCK_O))``: one output tile per program."""
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    row_ok = rows < T
    col_ok = cols < OUT
    rows64 = rows.to(tl.int64)
    cols64 = cols.to(tl.int64)
    acc = tl.zeros((BLOCK_T, BLOCK_O), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        expert = (ks // R).to(tl.int64)
        j = (ks % R).to(tl.int64)
        a_mask = row_ok[:, None] & k_ok[None, :]
        g = tl.load(
            g_ptr + rows64[:, None] * stride_gt + expert[None, :] * stride_gn,
            mask=a_mask,
            other=0.0,
        ).to(tl.float32)
        h = tl.load(
            h_ptr + rows64[:, None] * stride_ht + j[None, :] * stride_hr,
            mask=a_mask,
            other=0.0,
        ).to(tl.float32)
        b = tl.load(
            b_ptr
            + expert[:, None] * stride_bn
            + cols64[None, :] * stride_bo
            + j[:, None] * stride_br,
            mask=k_ok[:, None] & col_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.dot(g * h, b, input_precision=PRECISION)  # (g ⊗ h) tile @ B̂ tile
    acc = acc * scaling
    tl.store(
        y_ptr + rows64[:, None] * stride_yt + cols64[None, :] * stride_yo,
        acc.to(y_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )


def expert_mix_triton(
    h: torch.Tensor, gates: torch.Tensor, B: torch.Tensor, scaling: float, out: torch.Tensor
) -> torch.Tensor:
    """Fill ``out [T, out]`` with ``scaling · Σ_n gates[:, n] · (h @ B[n]ᵀ)``; arguments checked by
    ``lope.ops.expert_mix``. Any strides; ``gates`` may have another float dtype than ``h``."""
    T, r = h.shape
    N, out_features, _ = B.shape
    if T == 0 or out_features == 0:
        return out
    # IEEE float32 products where the inputs are float32 (TF32 would lose 3 digits); for 16-bit
    # inputs TF32's 10-bit mantissa already exceeds the inputs' own.
    precision = "ieee" if h.dtype in (torch.float32, torch.float64) else "tf32"

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_T"]), triton.cdiv(out_features, meta["BLOCK_O"]))

    _expert_mix_kernel[grid](
        h,
        gates,
        B,
        out,
        T,
        out_features,
        r,
        N * r,
        float(scaling),
        h.stride(0),
        h.stride(1),
        gates.stride(0),
        gates.stride(1),
        B.stride(0),
        B.stride(1),
        B.stride(2),
        out.stride(0),
        out.stride(1),
        PRECISION=precision,
        BLOCK_K=BLOCK_K,
    )
    return out
