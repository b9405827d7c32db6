"""Public ops of ptmoe: argument checks and the torch paths of composition, pooling and routing.

No Triton kernel: composing a prompt is two small GEMMs per batch (``bn,ntr->btr`` then ``@ B``),
``b·(k·T·R + T·R·H)`` FLOPs, negligible beside the forward of the model it feeds.
"""

from __future__ import annotations

import torch

from .reference import compose_reference

__all__ = ["compose", "masked_mean", "route", "svd_factors"]

BACKENDS = ("torch", "reference")


def _float_tensor(name: str, x, ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")


def compose(
    A: torch.Tensor, B: torch.Tensor, weights: torch.Tensor, backend: str = "torch"
) -> torch.Tensor:
    """Routed prompts ``P(x_b) = (Σ_i w_{b,i} A_i) B``.

    Args:
        A: ``[N, T, R]`` per-expert factors.
        B: ``[R, H]`` shared factor (same dtype and device as ``A``).
        weights: ``[b, N]`` routing weights (zeros for experts not kept).
        backend: ``"torch"`` (mix the ``A_i`` first, then one GEMM with ``B``) or ``"reference"``
            (every ``A_i B`` built in float64; returned in float64).

    Returns:
        ``[b, T, H]`` prompts.

    Example:
        >>> A, B, w = torch.ones(2, 3, 1), torch.ones(1, 4), torch.tensor([[0.25, 0.0]])
        >>> compose(A, B, w).shape
        torch.Size([1, 3, 4])
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    _float_tensor("A", A, 3)
    _float_tensor("B", B, 2)
    _float_tensor("weights", weights, 2)
    if B.shape[0] != A.shape[2]:
        raise ValueError(
            f"B: expected {A.shape[2]} rows (the rank R of A), got shape {tuple(B.shape)}"
        )
    if weights.shape[1] != A.shape[0]:
        raise ValueError(f"weights: expected shape (b, N={A.shape[0]}), got {tuple(weights.shape)}")
    for name, x in (("B", B), ("weights", weights)):
        if x.device != A.device:
            raise ValueError(f"{name}: expected device {A.device}, got {x.device}")
    if backend == "reference":
        return compose_reference(A, B, weights)
    if B.dtype != A.dtype:
        raise TypeError(f"B: expected the dtype of A ({A.dtype}), got {B.dtype}")
    mixed = torch.einsum("bn,ntr->btr", weights.to(A.dtype), A)
    return mixed @ B


def masked_mean(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x_b = Σ_t m_t e_t / Σ_t m_t``: the router input. ``[b, S, H], [b, S] -> [b, H]``.

    Rows with an empty mask are refused (their mean is undefined).
    """
    _float_tensor("embeds", embeds, 3)
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask: expected a torch.Tensor, got {type(mask).__name__}")
    if mask.shape != embeds.shape[:2]:
        raise ValueError(
            f"mask: expected shape {tuple(embeds.shape[:2])} (like the input ids), got {tuple(mask.shape)}"
        )
    m = mask.to(embeds.dtype)
    count = m.sum(1, keepdim=True)
    if bool((count == 0).any()):
        rows = (count[:, 0] == 0).nonzero().flatten().tolist()
        raise ValueError(f"mask: rows {rows} select no source token; the router needs at least one")
    return torch.einsum("bs,bsh->bh", m, embeds) / count


def route(
    logits: torch.Tensor,
    routing: str = "topk",
    top_k: int = 1,
    noise: torch.Tensor | None = None,
    sigma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Router weights from logits: ``softmax(l·(1 + σ·ε))``, then the top-k mask (no renormalising).

    Args:
        logits: ``[b, N]`` router logits ``W x + b``.
        routing: ``"topk"`` or ``"soft"`` (all weights kept).
        top_k: experts kept under ``"topk"``, in ``[1, N]``.
        noise: ``[b, N]`` standard-normal ε (train mode) or ``None`` (evaluation).
        sigma: σ of the multiplicative noise; zero logits stay zero.

    Returns:
        ``(weights [b, N], experts [b, k])``: experts sorted by descending weight.
    """
    _float_tensor("logits", logits, 2)
    n = logits.shape[1]
    if routing not in ("topk", "soft"):
        raise ValueError(f"routing: expected 'topk' or 'soft', got {routing!r}")
    if not 1 <= top_k <= n:
        raise ValueError(f"top_k: expected 1 <= top_k <= N = {n}, got {top_k}")
    if noise is not None:
        if noise.shape != logits.shape:
            raise ValueError(
                f"noise: expected shape {tuple(logits.shape)}, got {tuple(noise.shape)}"
            )
        logits = logits * (1 + sigma * noise)
    probs = torch.softmax(logits, dim=-1)
    k = top_k if routing == "topk" else n
    kept, experts = probs.topk(k, dim=-1)
    if routing == "soft":
        return probs, experts
    weights = torch.zeros_like(probs).scatter(1, experts, kept)
    return weights, experts


def svd_factors(E: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best rank-R factors of ``E [T, H]`` on its own scale: ``A = U_R Σ_R^½``, ``B = Σ_R^½ V_Rᵀ``.

    Computed in float64 and returned in ``E``'s dtype. Needs ``rank <= min(T, H)``.
    """
    _float_tensor("E", E, 2)
    t, h = E.shape
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"rank: expected an int, got {type(rank).__name__}")
    if not 1 <= rank <= min(t, h):
        raise ValueError(
            f"rank: the SVD init needs 1 <= R <= min(T, H) = min({t}, {h}), got R = {rank}"
        )
    U, S, Vh = torch.linalg.svd(E.detach().double(), full_matrices=False)
    root = S[:rank].sqrt()
    return (U[:, :rank] * root).to(E.dtype), (root[:, None] * Vh[:rank]).to(E.dtype)
