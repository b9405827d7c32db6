"""SWAN's update direction in torch: GradNorm then GradWhitening by Newton–Schulz.

SWAN (Ma et al. 2024, "SWAN: SGD with Normalization and Whitening") is, in the multi-normalisation
view of the SinkGD paper, another stateless instance: standardise every row of the gradient, then
whiten it, ``ΔW = (G̃ G̃ᵀ)^{-1/2} G̃``, which for a full-rank ``G̃ = U Σ Vᵀ`` is the polar factor
``U Vᵀ``. The inverse square root is computed without an SVD by the cubic Newton–Schulz iteration
``X ← 1.5 X − 0.5 (X Xᵀ) X`` that drives every singular value to one (it converges for singular
values in ``(0, √3)``; the input is pre-scaled by ``‖X Xᵀ‖_F^{1/2} ≥ σ_max``).
"""

from __future__ import annotations

import torch

from .sinkhorn import accumulation_dtype

__all__ = ["grad_norm_torch", "newton_schulz_polar", "swan_direction_torch"]


def grad_norm_torch(grad: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Row standardisation (mean 0, population std 1 across the ``n`` columns), batched.

    Args:
        grad: ``(..., m, n)``.
        eps: lower clamp of the standard deviation (a constant row becomes zero).

    Returns:
        ``(..., m, n)`` in the accumulation dtype (float32, or float64 for float64 input).
    """
    g = grad.to(accumulation_dtype(grad.dtype))
    centred = g - g.mean(dim=-1, keepdim=True)
    std = centred.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return centred / std.clamp_min(eps)


def newton_schulz_polar(x: torch.Tensor, steps: int = 10, eps: float = 1e-8) -> torch.Tensor:
    """Approximate polar factor ``U Vᵀ`` of ``x = U Σ Vᵀ`` by the cubic Newton–Schulz iteration.

    Works on the smaller Gram matrix (transposes wide/tall inputs as needed). Singular values far
    below the largest converge slowly (×1.5 per step while small); ``steps`` trades accuracy for time.

    Args:
        x: ``(..., m, n)``.
        steps: number of iterations.
        eps: guards the pre-scaling of a zero matrix.

    Returns:
        ``(..., m, n)``.
    """
    transpose = x.shape[-2] > x.shape[-1]
    if transpose:
        x = x.mT
    gram = x @ x.mT
    # ‖X Xᵀ‖_F^{1/2} = (Σ σ⁴)^{1/4} ≥ σ_max: a tighter bound than ‖X‖_F, so small singular
    # values start closer to one.
    scale = gram.norm(dim=(-2, -1), keepdim=True).sqrt().clamp_min(eps)
    x = x / scale
    gram = gram / (scale * scale)
    for step in range(steps):
        if step > 0:
            gram = x @ x.mT
        x = 1.5 * x - 0.5 * (gram @ x)
    return x.mT if transpose else x


def swan_direction_torch(
    grad: torch.Tensor, ns_steps: int = 10, eps: float = 1e-8, rescale: bool = True
) -> torch.Tensor:
    """SWAN's direction ``GradWhitening(GradNorm(G))``, batched, in float32 (float64 for float64).

    Args:
        grad: ``(..., m, n)`` gradient.
        ns_steps: Newton–Schulz iterations.
        eps: lower clamp of the row standard deviation.
        rescale: multiply by ``‖G̃‖_F / ‖ΔW‖_F`` so that the direction has the Frobenius norm of the
            standardised gradient (entry RMS one, as SinkGD's), which lets SWAN share SinkGD's lr.

    Returns:
        ``(..., m, n)`` direction in the accumulation dtype.
    """
    normed = grad_norm_torch(grad, eps)
    white = newton_schulz_polar(normed, ns_steps, eps)
    if rescale:
        num = normed.norm(dim=(-2, -1), keepdim=True)
        den = white.norm(dim=(-2, -1), keepdim=True).clamp_min(eps)
        white = white * (num / den)
    return white
