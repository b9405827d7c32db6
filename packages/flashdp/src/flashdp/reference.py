"""Naive, readable reference implementations of flashdp: the spec in code (float64).

The weight gradient of sample ``i`` of a linear layer ``y = x Wᵀ + b`` is obtained by running
autograd on that sample alone, in float64; its Frobenius norm gives the clip factor
``cᵢ = min(1, C / (‖gᵢ‖ + ξ))`` and the clipped sum is ``Σᵢ cᵢ gᵢ`` (spec §2).
"""

from __future__ import annotations

import torch


def flatten_linear_inputs(
    x: torch.Tensor, grad_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """View ``x`` as (B, T, N) and ``grad_out`` as (B, T, M): 2-D inputs get T = 1, >3-D flatten."""
    if x.dim() == 2:
        return x.unsqueeze(1), grad_out.unsqueeze(1)
    return x.reshape(x.shape[0], -1, x.shape[-1]), grad_out.reshape(
        grad_out.shape[0], -1, grad_out.shape[-1]
    )


def per_sample_linear_grads(
    x: torch.Tensor, grad_out: torch.Tensor, bias: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-sample weight (and bias) gradients by float64 autograd, one sample at a time.

    Args:
        x: (B, ..., N) layer input.
        grad_out: (B, ..., M) gradient of the summed loss with respect to the layer output.
        bias: also return the per-sample bias gradients.

    Returns:
        ``(gw, gb)``: gw (B, M, N) float64 and gb (B, M) float64 (None without ``bias``).

    Example:
        >>> x, g = torch.randn(3, 5, 4), torch.randn(3, 5, 2)
        >>> per_sample_linear_grads(x, g)[0].shape
        torch.Size([3, 2, 4])
    """
    x3, g3 = flatten_linear_inputs(x.detach().double(), grad_out.detach().double())
    n, m = x3.shape[-1], g3.shape[-1]
    gws, gbs = [], []
    for i in range(x3.shape[0]):
        w = torch.zeros(m, n, dtype=torch.float64, requires_grad=True)
        b = torch.zeros(m, dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            y = torch.nn.functional.linear(x3[i], w, b)
            gw, gb = torch.autograd.grad(y, (w, b), grad_outputs=g3[i])
        gws.append(gw)
        gbs.append(gb)
    gw = torch.stack(gws) if gws else torch.zeros(0, m, n, dtype=torch.float64)
    gb = torch.stack(gbs) if gbs else torch.zeros(0, m, dtype=torch.float64)
    return gw, (gb if bias else None)


def clip_factors(norms: torch.Tensor, max_norm: float, eps: float = 1e-6) -> torch.Tensor:
    """``cᵢ = min(1, C / (‖gᵢ‖ + ξ))`` (κ = 1 as in the official code, ξ as in Opacus)."""
    return (max_norm / (norms + eps)).clamp(max=1.0)


def clipped_sum(per_sample: torch.Tensor, max_norm: float, eps: float = 1e-6) -> torch.Tensor:
    """``Σᵢ cᵢ gᵢ`` over the first dim of ``per_sample`` (B, ...), in its dtype."""
    norms = per_sample.flatten(1).norm(dim=1)
    c = clip_factors(norms, max_norm, eps)
    return (c.view(-1, *([1] * (per_sample.dim() - 1))) * per_sample).sum(0)


def per_sample_norms(x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """(B,) float64 Frobenius norms of the per-sample weight gradients ``Gᵢᵀ Xᵢ``."""
    gw, _ = per_sample_linear_grads(x, grad_out)
    return gw.flatten(1).norm(dim=1)


def clipped_linear_weight_grad(
    x: torch.Tensor, grad_out: torch.Tensor, max_norm: float, eps: float = 1e-6
) -> torch.Tensor:
    """(M, N) float64 ``Σᵢ cᵢ Gᵢᵀ Xᵢ``: the spec of :func:`flashdp.ops.clipped_linear_weight_grad`.

    Example:
        >>> x, g = torch.randn(3, 5, 4), torch.randn(3, 5, 2)
        >>> clipped_linear_weight_grad(x, g, 1.0).dtype
        torch.float64
    """
    gw, _ = per_sample_linear_grads(x, grad_out)
    return clipped_sum(gw, max_norm, eps)


def clipped_linear_bias_grad(
    grad_out: torch.Tensor, max_norm: float, eps: float = 1e-6
) -> torch.Tensor:
    """(M,) float64 ``Σᵢ cᵢ Σ_t G_{i,t}`` with the norm of the summed bias gradient."""
    g = grad_out.detach().double()
    g = g.reshape(g.shape[0], -1, g.shape[-1]) if g.dim() > 1 else g
    return clipped_sum(g.sum(1), max_norm, eps)
