"""Naive, readable reference implementations of sinkgd: the spec in code (float64-capable).

Everything here is written for clarity, one matrix at a time, in whatever dtype it is given (pass
float64 for a reference). The fast paths in :mod:`sinkgd.sinkhorn`, :mod:`sinkgd.kernels` and
:mod:`sinkgd.optim` are tested against these functions.

Notation (paper, Alg. 3): a gradient ``G`` of shape ``(m, n)``; ``Q(X) = diag(‖X_{i,:}‖₂)`` (row
norms), ``R(X) = diag(‖X_{:,j}‖₂)`` (column norms).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "grad_norm",
    "polar_factor",
    "sinkgd_step",
    "sinkhorn_knopp",
    "sr_sinkhorn",
    "swan_direction",
]


def sr_sinkhorn(grad: torch.Tensor, num_iters: int = 5, eps: float = 1e-8) -> torch.Tensor:
    """Square-root Sinkhorn (paper Alg. 3), a plain loop over the two normalisations.

    Repeats ``num_iters`` times: scale every row to ℓ2 norm √n, then every column to ℓ2 norm √m.
    Norms are clamped below at ``eps`` so that zero rows and columns stay zero.

    Args:
        grad: ``(m, n)`` matrix.
        num_iters: L, the number of (row, column) normalisation pairs.
        eps: lower clamp of the norms.

    Returns:
        ``(m, n)`` matrix in ``grad``'s dtype.
    """
    m, n = grad.shape
    x = grad.clone()
    for _ in range(num_iters):
        x = math.sqrt(n) * x / x.norm(dim=1, keepdim=True).clamp_min(eps)  # P_{g1}: √n Q(X)⁻¹ X
        x = math.sqrt(m) * x / x.norm(dim=0, keepdim=True).clamp_min(eps)  # P_{g2}: √m X R(X)⁻¹
    return x


def sinkhorn_knopp(
    a: torch.Tensor, row_sum: float, col_sum: float, num_iters: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Classical Sinkhorn–Knopp on a non-negative matrix ``a``: ``diag(u) a diag(v)``.

    Alternately rescales rows to sum ``row_sum`` and columns to sum ``col_sum``. On ``a = G ⊙ G``
    with sums ``n`` and ``m`` it gives the squared scales of :func:`sr_sinkhorn`:
    ``sr_sinkhorn(G) = diag(√u) G diag(√v)``.

    Args:
        a: ``(m, n)`` non-negative matrix without zero rows or columns.
        row_sum: target sum of every row.
        col_sum: target sum of every column.
        num_iters: number of (row, column) rescaling pairs.

    Returns:
        ``(u, v)``: the row scales ``(m,)`` and the column scales ``(n,)``.
    """
    m, n = a.shape
    u = torch.ones(m, dtype=a.dtype, device=a.device)
    v = torch.ones(n, dtype=a.dtype, device=a.device)
    for _ in range(num_iters):
        u = row_sum / (a @ v)
        v = col_sum / (a.T @ u)
    return u, v


def sinkgd_step(
    param: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    num_iters: int = 5,
    weight_decay: float = 0.0,
    eps: float = 1e-8,
) -> torch.Tensor:
    """One SinkGD step (paper Alg. 4) with decoupled weight decay, out of place.

    ``W ← W (1 − lr·λ) − lr · SR-Sinkhorn(∇W, L)``.

    Args:
        param: ``(m, n)`` weight.
        grad: ``(m, n)`` gradient.
        lr: step size η.
        num_iters: L.
        weight_decay: λ (decoupled, as in ``torch.optim.Muon``).
        eps: lower clamp of the norms.

    Returns:
        The new ``(m, n)`` weight.
    """
    return param * (1 - lr * weight_decay) - lr * sr_sinkhorn(grad, num_iters, eps)


def grad_norm(grad: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """SWAN's GradNorm: standardise every row across its ``n`` columns (mean 0, std 1).

    ``G̃ = (G − ḡ 1ᵀ) / (s 1ᵀ)`` with ``ḡ`` and ``s`` the row mean and (population) standard
    deviation. A constant row becomes zero.

    Args:
        grad: ``(m, n)`` matrix.
        eps: lower clamp of the standard deviation.

    Returns:
        ``(m, n)`` matrix.
    """
    centred = grad - grad.mean(dim=1, keepdim=True)
    std = centred.pow(2).mean(dim=1, keepdim=True).sqrt()
    return centred / std.clamp_min(eps)


def polar_factor(x: torch.Tensor) -> torch.Tensor:
    """The orthogonal polar factor ``U Vᵀ`` of ``x = U Σ Vᵀ`` by SVD: ``(x xᵀ)^{-1/2} x``.

    Args:
        x: ``(m, n)`` matrix of full rank.

    Returns:
        ``(m, n)`` matrix whose singular values are all one.
    """
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    return u @ vh


def swan_direction(grad: torch.Tensor, rescale: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """SWAN's update direction: GradWhitening(GradNorm(G)) by an exact SVD.

    Args:
        grad: ``(m, n)`` gradient.
        rescale: multiply by ``‖G̃‖_F / ‖UVᵀ‖_F`` so that the direction has the Frobenius norm of
            the standardised gradient (entry RMS one, like SinkGD's).
        eps: lower clamp of the row standard deviation.

    Returns:
        ``(m, n)`` direction (the step is ``W ← W − lr · direction``).
    """
    normed = grad_norm(grad, eps)
    white = polar_factor(normed)
    if rescale:
        white = white * (normed.norm() / white.norm().clamp_min(eps))
    return white
