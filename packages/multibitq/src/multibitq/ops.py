"""Public ops of multibitq: argument checks and the straight-through quantizers.

- :func:`quantize_weight` and :func:`quantize_activation` are the Any-Precision (DoReFa-style)
  quantizers. ``round`` rounds half to even and passes gradients straight through (:class:`RoundSTE`);
  everything around it is ordinary autograd, so the gradient equals the autograd gradient of the
  same expression with ``round`` replaced by the identity (``reference.*_surrogate``).
- :func:`correct_weight_bias` is the paper's weight bias correction: each output channel of the
  quantized weight gets the mean and (population) std of the full-precision child's weight.

All three work in the input's dtype on any device; :mod:`multibitq.reference` holds the float64
versions they are tested against.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from multibitq.reference import _TINY, FULL_PRECISION, SIGMA_EPS

__all__ = [
    "CORRECTIONS",
    "GRANULARITIES",
    "SUPPORTED_BITS",
    "RoundSTE",
    "check_bits",
    "correct_weight_bias",
    "quantize_activation",
    "quantize_weight",
]

#: Bit-widths a child may have: 1 to 8 bits, and 32 for full precision.
SUPPORTED_BITS = (1, 2, 3, 4, 5, 6, 7, 8, FULL_PRECISION)
#: Accepted ``granularity`` values of :func:`correct_weight_bias`.
GRANULARITIES = ("channel", "tensor")
#: Accepted correction modes (``"none"`` is handled by the modules, which then skip the op).
CORRECTIONS = ("mean_var", "mean", "none")


def check_bits(bits: Any, name: str = "bits") -> int:
    """Validate a bit-width and return it as an ``int``.

    Raises:
        TypeError: ``bits`` is not an integer (``bool`` and floats are refused).
        ValueError: ``bits`` is not in 1–8 or 32.
    """
    if isinstance(bits, bool):
        raise TypeError(f"{name}: expected an int in 1-8 or 32, got bool {bits!r}")
    try:
        value = operator.index(bits)
    except TypeError:
        raise TypeError(
            f"{name}: expected an int in 1-8 or 32, got {type(bits).__name__} {bits!r}"
        ) from None
    if value not in SUPPORTED_BITS:
        raise ValueError(f"{name}: expected an int in 1-8 or 32, got {value}")
    return value


def _check_float_tensor(t: Any, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {t.dtype}")


class RoundSTE(torch.autograd.Function):
    """``torch.round`` (half to even) forward, identity backward (straight-through estimator)."""

    generate_vmap_rule = True  # so torch.func (per-sample gradients) can vmap over it

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def quantize_weight(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Quantize a weight tensor to ``bits`` bits (Any-Precision / DoReFa weights).

    ``W_b = E·(2q − 1)`` with ``q = round((tanh W/(2 max|tanh W|) + ½)(2^b − 1))/(2^b − 1)`` and
    ``E = mean|W|`` (detached, per tensor); ``W_32 = E·tanh W/max|tanh W|``. So ``W_b/E`` lies on
    ``{2j/(2^b − 1) − 1}``: ``{−1, 1}`` at 1 bit.

    Args:
        w: weight of any shape, floating point.
        bits: 1–8, or 32 for the full-precision child.

    Returns:
        A tensor like ``w``; its gradient is straight-through for ``round``.

    Example:
        >>> w = torch.tensor([[-2.0, -0.1, 0.3, 1.0]])
        >>> (quantize_weight(w, 1) / w.abs().mean()).tolist()
        [[-1.0, -1.0, 1.0, 1.0]]
    """
    _check_float_tensor(w, "w")
    bits = check_bits(bits)
    scale = w.detach().abs().mean()
    t = torch.tanh(w)
    peak = t.abs().max().clamp_min(_TINY if w.dtype == torch.float64 else torch.finfo(w.dtype).tiny)
    if bits == FULL_PRECISION:
        return scale * t / peak
    levels = 2**bits - 1
    q = RoundSTE.apply((t / (2 * peak) + 0.5) * levels) / levels
    return scale * (2 * q - 1)


def quantize_activation(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Quantize activations: ``round(clamp(x, 0, 1)(2^b − 1))/(2^b − 1)``, or ``relu(x)`` at 32 bits.

    Ties round half to even; ``round`` passes gradients straight through and ``clamp`` has its
    usual gradient (zero outside [0, 1]).

    Example:
        >>> quantize_activation(torch.tensor([-1.0, 0.5, 0.9, 2.0]), 1).tolist()
        [0.0, 0.0, 1.0, 1.0]
    """
    _check_float_tensor(x, "x")
    bits = check_bits(bits)
    if bits == FULL_PRECISION:
        return torch.relu(x)
    levels = 2**bits - 1
    return RoundSTE.apply(x.clamp(0, 1) * levels) / levels


def correct_weight_bias(
    w_q: torch.Tensor,
    w_ref: torch.Tensor,
    granularity: str = "channel",
    stats_grad: bool = False,
    mode: str = "mean_var",
) -> torch.Tensor:
    """Weight bias correction: give each channel of ``w_q`` the mean and std of ``w_ref``'s.

    ``Ŵ[c] = (W_q[c] − μ_q)·σ_ref/σ_q + μ_ref`` per output channel (``granularity="channel"``) or
    over the whole tensor (``"tensor"``), with population statistics. A channel whose levels are
    all equal (``σ_q ≤ 1e-12·σ_ref``) gets the mean shift only, so constant and zero tensors stay
    finite. ``mode="mean"`` corrects the mean only. With ``stats_grad=False`` (default) the
    statistics are constants, so the gradient is ``(σ_ref/σ_q)·∂L/∂Ŵ`` and ``w_ref`` gets none.
    Passing the same tensor twice (the 32-bit child) returns it unchanged.

    Args:
        w_q: quantized weight, shape (out, in, kh, kw) or (out, in).
        w_ref: the full-precision child's weight, same shape, dtype and device.
        granularity: ``"channel"`` or ``"tensor"``.
        stats_grad: let gradients flow through the statistics.
        mode: ``"mean_var"`` or ``"mean"``.

    Example:
        >>> w = torch.randn(3, 4, dtype=torch.float64)
        >>> out = correct_weight_bias(quantize_weight(w, 2), quantize_weight(w, 32))
        >>> torch.allclose(out.mean(1), quantize_weight(w, 32).mean(1))
        True
    """
    _check_float_tensor(w_q, "w_q")
    _check_float_tensor(w_ref, "w_ref")
    if w_q.dim() not in (2, 4):
        raise ValueError(
            f"w_q: expected a 2-D (out, in) or 4-D (out, in, kh, kw) weight, got shape {tuple(w_q.shape)}"
        )
    if w_ref.shape != w_q.shape:
        raise ValueError(
            f"w_ref: expected the shape of w_q {tuple(w_q.shape)}, got {tuple(w_ref.shape)}"
        )
    if w_ref.dtype != w_q.dtype or w_ref.device != w_q.device:
        raise TypeError(
            f"w_ref: expected dtype {w_q.dtype} on {w_q.device}, got {w_ref.dtype} on {w_ref.device}"
        )
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: expected one of {GRANULARITIES}, got {granularity!r}")
    if mode not in ("mean_var", "mean"):
        raise ValueError(f"mode: expected 'mean_var' or 'mean', got {mode!r}")
    if not isinstance(stats_grad, bool):
        raise TypeError(f"stats_grad: expected a bool, got {type(stats_grad).__name__}")
    if w_q is w_ref:
        return w_q
    rows = w_q.shape[0] if granularity == "channel" else 1
    q, r = w_q.reshape(rows, -1), w_ref.reshape(rows, -1)
    if not stats_grad:
        q_stats, r = q.detach(), r.detach()
    else:
        q_stats = q
    mu_q, mu_r = q_stats.mean(1, keepdim=True), r.mean(1, keepdim=True)
    var_q = ((q_stats - mu_q) ** 2).mean(1, keepdim=True)
    var_r = ((r - mu_r) ** 2).mean(1, keepdim=True)
    # sqrt has an infinite derivative at 0: only take it where the variance is positive.
    sigma_q = torch.where(var_q > 0, var_q, 1).sqrt() * (var_q > 0)
    sigma_r = torch.where(var_r > 0, var_r, 1).sqrt() * (var_r > 0)
    shift_only = sigma_q <= SIGMA_EPS * sigma_r
    if mode == "mean":
        ratio = torch.ones_like(sigma_q)
    else:
        ratio = torch.where(shift_only, 1, sigma_r / torch.where(shift_only, 1, sigma_q))
    return ((q - mu_q) * ratio + mu_r).reshape(w_q.shape)
