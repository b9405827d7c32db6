"""The torch (CPU) implementation: per-sample gradients chunk by chunk, clipped and summed.

Chunks of ``b_c`` samples bound the scratch to ``b_c·M·N`` floats (default ``b_c`` from a byte
budget of 2·|W|): per-sample gradients of one chunk are formed with one batched GEMM, their squared
norms reduced in fp32, and the clipped chunk added to the (M, N) accumulator.
"""

from __future__ import annotations

import torch

from .reference import flatten_linear_inputs


def samples_per_chunk(
    m: int, n: int, batch: int, chunk_bytes: int | None, itemsize: int = 4
) -> int:
    """``b_c``: how many (M, N) per-sample gradients fit in ``chunk_bytes`` (default 2·|W|)."""
    budget = 2 * m * n * itemsize if chunk_bytes is None else chunk_bytes
    return max(1, min(batch, budget // max(1, m * n * itemsize)))


def _accumulation_dtype(*ts: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in ts) else torch.float32


def clipped_weight_grad_chunked(
    x: torch.Tensor,
    grad_out: torch.Tensor,
    max_norm: float,
    eps: float = 1e-6,
    chunk_bytes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σᵢ cᵢ Gᵢᵀ Xᵢ, ‖Gᵢᵀ Xᵢ‖)`` with shapes (M, N) and (B,) (see ``ops``)."""
    dtype = _accumulation_dtype(x, grad_out)
    x3, g3 = flatten_linear_inputs(x, grad_out)
    b, m, n = x3.shape[0], g3.shape[-1], x3.shape[-1]
    out = torch.zeros(m, n, dtype=dtype, device=x.device)
    norms = torch.empty(b, dtype=dtype, device=x.device)
    step = samples_per_chunk(m, n, b, chunk_bytes, torch.finfo(dtype).bits // 8)
    for start in range(0, b, step):
        xc = x3[start : start + step].to(dtype)
        gc = g3[start : start + step].to(dtype)
        per_sample = torch.bmm(gc.transpose(1, 2), xc)
        # Σ tile² by rows, then over rows (the kernel's intra- then inter-block reduction):
        # a flat fp32 norm over 10⁶ elements loses ~1e-5 relative accuracy, this keeps ~1e-7.
        # Row dot products, so no second (b_c, M, N) temporary is formed.
        nc = torch.einsum("bmn,bmn->bm", per_sample, per_sample).sum(-1).sqrt()
        norms[start : start + step] = nc
        c = (max_norm / (nc + eps)).clamp(max=1.0)
        # in place: out += c @ per_sample, without an (M, N) temporary
        out.view(1, -1).addmm_(c.view(1, -1), per_sample.view(per_sample.shape[0], -1))
    return out, norms


def per_sample_norms_chunked(
    x: torch.Tensor, grad_out: torch.Tensor, chunk_bytes: int | None = None
) -> torch.Tensor:
    """(B,) per-sample weight-gradient norms, chunk by chunk."""
    return clipped_weight_grad_chunked(x, grad_out, 1.0, 1e-6, chunk_bytes)[1]
