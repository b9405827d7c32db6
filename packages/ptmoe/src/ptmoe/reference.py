"""Naive, readable reference implementations of ptmoe: the spec in code (float64).

Every function computes in float64 on CPU, one example or one expert at a time, so the fast paths
in :mod:`ptmoe.ops` and :mod:`ptmoe.prompt` can be checked against it forward and backward.
"""

from __future__ import annotations

import torch

__all__ = ["compose_reference", "masked_mean_reference", "route_reference", "svd_init_reference"]


def compose_reference(A: torch.Tensor, B: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``P(x_b) = Σ_i w_{b,i} (A_i B)``, every expert prompt ``A_i B`` built in full, in float64.

    Args:
        A: ``[N, T, R]`` per-expert factors.
        B: ``[R, H]`` shared factor.
        weights: ``[b, N]`` routing weights (zeros for experts not kept).

    Returns:
        ``[b, T, H]`` float64 prompts.
    """
    A, B, weights = A.double(), B.double(), weights.double()
    experts = torch.stack([A[i] @ B for i in range(A.shape[0])])  # [N, T, H]
    rows = []
    for b in range(weights.shape[0]):
        prompt = torch.zeros_like(experts[0])
        for i in range(experts.shape[0]):
            prompt = prompt + weights[b, i] * experts[i]
        rows.append(prompt)
    return torch.stack(rows)


def masked_mean_reference(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x_b = Σ_t m_t e_t / Σ_t m_t`` per example, in float64: ``[b, S, H], [b, S] -> [b, H]``."""
    rows = []
    for b in range(embeds.shape[0]):
        keep = mask[b].bool()
        rows.append(embeds[b][keep].double().mean(0))
    return torch.stack(rows)


def route_reference(
    pooled: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    routing: str = "topk",
    top_k: int = 1,
    noise: torch.Tensor | None = None,
    sigma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The router of the spec in float64: logits, optional multiplicative noise, softmax, top-k.

    Args:
        pooled: ``[b, H]`` masked means of the source embeddings.
        weight: ``[N, H]`` router matrix W (``None`` for uniform routing).
        bias: ``[N]`` router bias b or ``None``.
        routing: ``"topk"``, ``"soft"`` or ``"uniform"``.
        top_k: experts kept under ``"topk"``; the kept weights are **not** renormalised.
        noise: ``[b, N]`` standard-normal ε for ``l·(1 + σ·ε)`` (train mode), or ``None``.
        sigma: σ.

    Returns:
        ``(weights [b, N], logits [b, N])`` in float64; uniform routing gives weights 1/N and
        zero logits.
    """
    pooled = pooled.double()
    if routing == "uniform":
        n = weight.shape[0] if weight is not None else top_k
        zeros = torch.zeros(pooled.shape[0], n, dtype=torch.float64)
        return zeros + 1.0 / n, zeros
    logits = pooled @ weight.double().T
    if bias is not None:
        logits = logits + bias.double()
    noisy = logits if noise is None else logits * (1 + sigma * noise.double())
    probs = torch.softmax(noisy, dim=-1)
    if routing == "soft":
        return probs, logits
    out = torch.zeros_like(probs)
    for b in range(probs.shape[0]):
        order = sorted(range(probs.shape[1]), key=lambda i: -probs[b, i].item())
        for i in order[:top_k]:
            out[b, i] = probs[b, i]
    return out, logits


def svd_init_reference(E: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``E = UΣVᵀ → A = U_R Σ_R^{1/2} [T, R]``, ``B = Σ_R^{1/2} V_Rᵀ [R, H]`` (float64)."""
    U, S, Vh = torch.linalg.svd(E.double(), full_matrices=False)
    root = S[:rank].sqrt()
    return U[:, :rank] * root, root[:, None] * Vh[:rank]
