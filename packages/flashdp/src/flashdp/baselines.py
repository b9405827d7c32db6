"""The baselines FlashDP is measured against, one linear layer at a time.

* ``nondp``: the plain weight gradient ``Σᵢ Gᵢᵀ Xᵢ`` (no clipping).
* ``explicit``: materialises all per-sample gradients (B, M, N), then clips and sums (Opacus-style).
* ``ghost``: ghost norms ``‖GᵢᵀXᵢ‖² = ⟨GᵢGᵢᵀ, XᵢXᵢᵀ⟩`` (B·T² memory), then one GEMM
  ``(c ⊙ G)ᵀ X`` in the same backward (book-keeping style, no second backward).

The Opacus arm of the training benchmark uses opacus itself (``GradSampleModule`` +
``DPPerLayerOptimizer``); :func:`opacus_clipped_weight_grad` is its op-level counterpart (opacus's
own linear grad sampler followed by the per-layer clip-and-sum of ``DPPerLayerOptimizer``).
"""

from __future__ import annotations

import torch

from .reference import clip_factors, flatten_linear_inputs


def nondp_weight_grad(x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """(M, N) ``Σᵢ Gᵢᵀ Xᵢ`` as one GEMM over the flattened B·T rows."""
    x3, g3 = flatten_linear_inputs(x, grad_out)
    return g3.reshape(-1, g3.shape[-1]).t() @ x3.reshape(-1, x3.shape[-1])


def explicit_clipped_weight_grad(
    x: torch.Tensor, grad_out: torch.Tensor, max_norm: float, eps: float = 1e-6
) -> torch.Tensor:
    """(M, N) clipped sum through the materialised (B, M, N) per-sample gradients."""
    x3, g3 = flatten_linear_inputs(x, grad_out)
    per_sample = torch.bmm(g3.transpose(1, 2), x3)
    c = clip_factors(per_sample.flatten(1).norm(dim=1), max_norm, eps)
    return torch.einsum("b,bmn->mn", c.to(per_sample.dtype), per_sample)


def ghost_norms(x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """(B,) ``‖GᵢᵀXᵢ‖_F`` from the T×T Gram matrices, never forming a per-sample gradient."""
    x3, g3 = flatten_linear_inputs(x, grad_out)
    gram_x = torch.bmm(x3, x3.transpose(1, 2))
    gram_g = torch.bmm(g3, g3.transpose(1, 2))
    return (gram_x * gram_g).flatten(1).sum(1).clamp(min=0).sqrt()


def ghost_clipped_weight_grad(
    x: torch.Tensor, grad_out: torch.Tensor, max_norm: float, eps: float = 1e-6
) -> torch.Tensor:
    """(M, N) clipped sum: ghost norms, then the single GEMM ``(c ⊙ G)ᵀ X``."""
    x3, g3 = flatten_linear_inputs(x, grad_out)
    c = clip_factors(ghost_norms(x3, g3), max_norm, eps)
    scaled = g3 * c.to(g3.dtype).view(-1, 1, 1)
    return scaled.reshape(-1, g3.shape[-1]).t() @ x3.reshape(-1, x3.shape[-1])


def opacus_clipped_weight_grad(
    x: torch.Tensor, grad_out: torch.Tensor, max_norm: float, eps: float = 1e-6
) -> torch.Tensor:
    """(M, N) clipped sum computed the way opacus does it for one layer.

    opacus's linear grad sampler (``compute_linear_grad_sample``) forms the (B, M, N) per-sample
    gradients; ``DPPerLayerOptimizer.clip_and_accumulate`` clips them with
    ``min(1, C / (‖gᵢ‖ + 1e-6))`` and sums with ``einsum("i,i...")``.
    """
    from opacus.grad_sample.linear import compute_linear_grad_sample

    x3, g3 = flatten_linear_inputs(x, grad_out)
    layer = torch.nn.Linear(x3.shape[-1], g3.shape[-1], bias=False, dtype=x3.dtype)
    per_sample = compute_linear_grad_sample(layer, [x3], g3)[layer.weight]
    norms = per_sample.reshape(per_sample.shape[0], -1).norm(2, dim=-1)
    factor = (max_norm / (norms + eps)).clamp(max=1.0)
    return torch.einsum("i,i...", factor, per_sample)
