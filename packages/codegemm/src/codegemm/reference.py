"""Naive, readable references: the spec in code, float64.

``dequantize_reference`` rebuilds ``Ŵ[r, jv:(j+1)v] = s[r, jv//g] · Σ_k B_k[codes[r, j, k]]``;
``codebook_matmul_reference`` is ``x @ Ŵᵀ`` in float64; ``psumbook_matmul_reference`` computes the
same product the CodeGEMM way, through the Psumbook ``P[n, j, k, c] = ⟨x[n, jv:(j+1)v], B_k[c]⟩``,
so a test can check the identity ``y[n, r] = Σ_j s[r, jv//g] Σ_k P[n, j, k, codes[r, j, k]]``.
"""

from __future__ import annotations

import torch

__all__ = [
    "codebook_matmul_reference",
    "dequantize_reference",
    "psumbook_matmul_reference",
    "psumbook_reference",
    "round_to_nearest_reference",
]


def dequantize_reference(
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Rebuild the weight.

    Args:
        codes: uint8 ``[M, K/v, m]``.
        codebooks: ``[m, C, v]``.
        scales: ``[M, K/g]``.
        dtype: the result's dtype (the arithmetic runs in float64).

    Returns:
        ``Ŵ [M, K]``.
    """
    rows, num_vectors, m = codes.shape
    v = codebooks.shape[2]
    k = num_vectors * v
    book = torch.arange(m, device=codes.device).view(1, 1, m)
    centroids = codebooks.double()[book, codes.long()]  # [M, K/v, m, v]
    unscaled = centroids.sum(dim=2).reshape(rows, k)
    group = k // scales.shape[1]
    weight = unscaled * scales.double().repeat_interleave(group, dim=1)
    return weight.to(dtype)


def codebook_matmul_reference(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """``y = x @ Ŵᵀ`` in float64: x ``[..., K]`` -> y ``[..., M]`` (float64)."""
    return x.double() @ dequantize_reference(codes, codebooks, scales).t()


def psumbook_reference(x: torch.Tensor, codebooks: torch.Tensor) -> torch.Tensor:
    """The Psumbook in float64: x ``[N, K]``, codebooks ``[m, C, v]`` -> P ``[N, K/v, m, C]``."""
    n, k = x.shape
    v = codebooks.shape[2]
    return torch.einsum("njv,mcv->njmc", x.double().reshape(n, k // v, v), codebooks.double())


def psumbook_matmul_reference(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """``x @ Ŵᵀ`` through the Psumbook (float64, unbatched gather): x ``[N, K]`` -> ``[N, M]``."""
    table = psumbook_reference(x, codebooks)  # [N, J, m, C]
    n, num_vectors, _m, _ = table.shape
    v = codebooks.shape[2]
    group = num_vectors * v // scales.shape[1]
    index = codes.long().permute(1, 2, 0).unsqueeze(0).expand(n, -1, -1, -1)  # [N, J, m, M]
    partial = torch.gather(table, 3, index).sum(dim=2)  # [N, J, M]: Σ_k P[n, j, k, codes[r, j, k]]
    group_of_vector = torch.arange(num_vectors, device=x.device) * v // group  # [J]
    per_vector_scale = scales.double()[:, group_of_vector].t()  # [J, M]
    return (partial * per_vector_scale).sum(dim=1)


def round_to_nearest_reference(
    weight: torch.Tensor, bits: int = 2, group_size: int = 128
) -> torch.Tensor:
    """Asymmetric min-max round-to-nearest per group of inputs, in float64: W ``[M, K]`` -> Ŵ.

    The baseline quantizer: ``2**bits`` uniform levels between each group's min and max (scale and
    zero point stored in fp16, so ``bits + 32/group_size`` bits per weight).
    """
    rows, k = weight.shape
    if k % group_size:
        raise ValueError(f"group_size: expected a divisor of K={k}, got {group_size}")
    w = weight.double().reshape(rows, k // group_size, group_size)
    low = w.amin(dim=-1, keepdim=True)
    high = w.amax(dim=-1, keepdim=True)
    levels = (1 << bits) - 1
    step = ((high - low) / levels).half().double().clamp_min(1e-12)
    low = low.half().double()
    q = torch.clamp(torch.round((w - low) / step), 0, levels)
    return (q * step + low).reshape(rows, k).to(weight.dtype)
