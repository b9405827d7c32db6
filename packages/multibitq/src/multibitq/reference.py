"""Naive, readable reference implementations of multibitq: the spec in code (float64).

Every function casts its inputs to float64 and follows the formulas of the spec
(``shared/methods/multibitq.md`` §2) line by line. The ``*_surrogate`` functions replace
``round`` by the identity: their autograd gradients are, by definition, the straight-through
(STE) gradients of the quantizers.

The base quantizer is the DoReFa-style one of Any-Precision (SHI-Labs/Any-Precision-DNNs,
``models/quan_ops.py``): weights ``W_b = E·(2·round((tanh W/(2 max|tanh W|) + ½)(2^b−1))/(2^b−1) − 1)``
with ``E = mean|W|`` detached, ``W_32 = E·tanh W/max|tanh W|``; activations
``round(clamp(x, 0, 1)(2^b−1))/(2^b−1)`` below 32 bits and ``relu(x)`` at 32 bits.
``torch.round`` rounds half to even.
"""

from __future__ import annotations

import torch

__all__ = [
    "FULL_PRECISION",
    "SIGMA_EPS",
    "correct_weight_bias",
    "quantize_activation",
    "quantize_activation_surrogate",
    "quantize_weight",
    "quantize_weight_surrogate",
]

#: The bit-width that means "full precision" (no rounding), as in Any-Precision.
FULL_PRECISION = 32
#: A channel whose quantized std is at most ``SIGMA_EPS·σ_ref`` gets a mean shift only.
SIGMA_EPS = 1e-12
#: Guards ``max|tanh W|`` of an all-zero tensor (the output is then ``E·0 = 0``).
_TINY = 1e-300


def _weight_parts(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    w = w.double()
    scale = w.abs().mean().detach()  # E, detached and per tensor
    t = torch.tanh(w)
    peak = t.abs().max().clamp_min(_TINY)
    return scale, t, peak


def quantize_weight(w: torch.Tensor, bits: int) -> torch.Tensor:
    """``W_b`` in float64 (``round`` half to even, no gradient through it)."""
    scale, t, peak = _weight_parts(w)
    if bits == FULL_PRECISION:
        return scale * t / peak
    levels = 2**bits - 1
    u = t / (2 * peak) + 0.5
    q = torch.round(u * levels).detach() / levels
    return scale * (2 * q - 1)


def quantize_weight_surrogate(w: torch.Tensor, bits: int) -> torch.Tensor:
    """``W_b`` with ``round`` replaced by the identity: its gradient is the STE gradient."""
    scale, t, peak = _weight_parts(w)
    if bits == FULL_PRECISION:
        return scale * t / peak
    levels = 2**bits - 1
    u = t / (2 * peak) + 0.5
    q = (u * levels) / levels
    return scale * (2 * q - 1)


def quantize_activation(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Activations in float64: ``relu`` at 32 bits, else the grid ``{j/(2^b−1)}`` (ties to even)."""
    x = x.double()
    if bits == FULL_PRECISION:
        return torch.relu(x)
    levels = 2**bits - 1
    return torch.round(x.clamp(0, 1) * levels) / levels


def quantize_activation_surrogate(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Activations with ``round`` replaced by the identity (the STE gradient's expression)."""
    x = x.double()
    if bits == FULL_PRECISION:
        return torch.relu(x)
    return x.clamp(0, 1)


def correct_weight_bias(
    w_q: torch.Tensor,
    w_ref: torch.Tensor,
    granularity: str = "channel",
    stats_grad: bool = False,
    mode: str = "mean_var",
) -> torch.Tensor:
    """``Ŵ_b[c] = (W_b[c] − μ_b)·σ_r/σ_b + μ_r`` per output channel, in float64, channel by channel.

    ``mode="mean"`` keeps the scale (``W_b[c] − μ_b + μ_r``). A channel with ``σ_b ≤ 1e-12·σ_r``
    (all levels equal) gets the mean shift only. Population std. With ``stats_grad=False`` the
    statistics are constants.
    """
    w_q, w_ref = w_q.double(), w_ref.double()
    if granularity == "tensor":
        groups_q, groups_r = [w_q.reshape(-1)], [w_ref.reshape(-1)]
    else:
        groups_q = [w_q[c].reshape(-1) for c in range(w_q.shape[0])]
        groups_r = [w_ref[c].reshape(-1) for c in range(w_ref.shape[0])]
    out = []
    for gq, gr in zip(groups_q, groups_r, strict=True):
        mu_b, mu_r = gq.mean(), gr.mean()
        sigma_b = ((gq - mu_b) ** 2).mean().sqrt()
        sigma_r = ((gr - mu_r) ** 2).mean().sqrt()
        if not stats_grad:
            mu_b, mu_r, sigma_b, sigma_r = (s.detach() for s in (mu_b, mu_r, sigma_b, sigma_r))
        if mode == "mean" or float(sigma_b) <= SIGMA_EPS * float(sigma_r):
            out.append(gq - mu_b + mu_r)
        else:
            out.append((gq - mu_b) * (sigma_r / sigma_b) + mu_r)
    return torch.cat(out).reshape(w_q.shape)
