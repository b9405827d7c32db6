"""Naive, readable reference implementations of ParetoQ: the spec in code (float64-capable).

Everything here is plain torch with no custom autograd, written to be read next to the paper and
the official code (facebookresearch/ParetoQ, ``models/utils_quant.py``). The fast paths in
:mod:`paretoq.ops` and :mod:`paretoq.packing` are tested against these functions.

Notation (per output row r of a weight ``W`` of shape ``(out, in)``):

- ``α`` (``alpha``, shape ``(out, 1)``) is the learnable per-row scale, clamped to ``≥ 1e-5`` in
  the forward; ``x = W / α``; the quantized weight is ``W_q = α · Q(x)``.
- ``g = 1/sqrt(numel(W) · Qp)`` is LSQ's gradient scale, with the *integer* ``Qp`` of the bit width
  (1 for 1, 1.58 and 2 bits; 3 for 3 bits; 7 for 4 bits).
- ``G`` is the upstream gradient ``∂L/∂W_q``.

Example (CPU):

    >>> import torch
    >>> from paretoq.reference import quantize_reference, level_set
    >>> w = torch.tensor([[-1.0, -0.2, 0.1, 0.9]], dtype=torch.float64)
    >>> alpha = torch.ones(1, 1, dtype=torch.float64)
    >>> quantize_reference(w, alpha, 2)
    tensor([[-0.7500, -0.2500,  0.2500,  0.7500]], dtype=torch.float64)
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

__all__ = [
    "ALPHA_EPS",
    "SEQ_CLIP",
    "SUPPORTED_BITS",
    "alpha_init_reference",
    "grad_scale",
    "integer_qp",
    "level_set",
    "pack_codes_reference",
    "quantize_autograd_reference",
    "quantize_grads_reference",
    "quantize_reference",
    "unpack_codes_reference",
]

#: Bit widths with a quantizer (1.58 is ternary, the official ``w_bits=0``); 16 is the identity.
SUPPORTED_BITS = (1, 1.58, 2, 3, 4)
#: Lower bound applied to α in the forward (official: ``torch.where(alpha > eps, alpha, eps)``).
ALPHA_EPS = 1e-5
#: SEQ clips ``x`` to ``±0.99`` so that ``x = ±1`` cannot create an extra level (official ``1 - 1e-2``).
SEQ_CLIP = 1 - 1e-2


def _seq_params(bits: float) -> tuple[float, float]:
    """``(n_levels, shift)`` of SEQ: ternary ``(1.5, 0)``, 2-bit ``(2, 0.5)``."""
    return (1.5, 0.0) if bits == 1.58 else (2.0, 0.5)


def integer_qp(bits: float) -> int:
    """The integer ``Qp`` used in the gradient scale: 1 for 1/1.58/2 bits, ``2^(b−1)−1`` for 3/4."""
    if bits in (1, 1.58):
        return 1
    return 2 ** (int(bits) - 1) - 1


def grad_scale(numel: int, bits: float) -> float:
    """LSQ gradient scale ``1/sqrt(numel · Qp)`` with ``numel`` of the whole matrix."""
    return 1.0 / math.sqrt(numel * integer_qp(bits))


def level_set(bits: float) -> list[Fraction]:
    """The exact levels of ``Q`` (multiples of α) for a bit width, as fractions.

    1: ``{−1, +1}`` (plus ``0`` for an exactly zero weight, ``sign(0) = 0``); 1.58: ``{−2/3, 0, 2/3}``;
    2: ``{−3/4, −1/4, 1/4, 3/4}``; 3: ``{−4, …, 3}``; 4: ``{−8, …, 7}``.
    """
    if bits == 1:
        return [Fraction(-1), Fraction(1)]
    if bits == 1.58:
        return [Fraction(-2, 3), Fraction(0), Fraction(2, 3)]
    if bits == 2:
        return [Fraction(k, 4) for k in (-3, -1, 1, 3)]
    if bits in (3, 4):
        half = 2 ** (int(bits) - 1)
        return [Fraction(k) for k in range(-half, half)]
    raise ValueError(f"bits: expected one of {SUPPORTED_BITS}, got {bits!r}")


def _clamped_alpha(alpha: torch.Tensor) -> torch.Tensor:
    return torch.clamp(alpha, min=ALPHA_EPS)


def _q_of_x(x: torch.Tensor, bits: float) -> torch.Tensor:
    """``Q(x)`` in units of α (round half to even, as ``torch.round``)."""
    if bits == 1:
        return torch.sign(x)
    if bits in (1.58, 2):
        n, s = _seq_params(bits)
        return (torch.round(torch.clamp(x, -SEQ_CLIP, SEQ_CLIP) * n - s) + s) / n
    qn, qp = -(2 ** (int(bits) - 1)), 2 ** (int(bits) - 1) - 1
    return torch.clamp(torch.round(x), qn, qp)


def quantize_reference(w: torch.Tensor, alpha: torch.Tensor, bits: float) -> torch.Tensor:
    """``W_q = α · Q(W / α)`` (forward only).

    Args:
        w: latent weight, shape ``(out, in)``.
        alpha: per-row scale, shape ``(out, 1)``.
        bits: one of 1, 1.58, 2, 3, 4, or 16 (identity).

    Returns:
        The quantized weight, shape ``(out, in)``, dtype of ``w``.
    """
    if bits >= 16:
        return w
    a = _clamped_alpha(alpha)
    return a * _q_of_x(w / a, bits)


def quantize_grads_reference(
    w: torch.Tensor,
    alpha: torch.Tensor,
    bits: float,
    grad_output: torch.Tensor,
    ternary_alpha_grad: str = "paretoq",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The closed-form straight-through gradients ``(∂L/∂W, ∂L/∂α)`` of the official code.

    - LSQ (3/4 bits): ``∂L/∂W = 1[Qn ≤ x ≤ Qp]·G``; ``∂L/∂α = Σ_row g·G·{Qn | Qp | round(x) − x}``.
    - 1 bit: ``∂L/∂W = 1[|x| ≤ 1]·G``; ``∂L/∂α = Σ_row g·sign(W)·G``.
    - SEQ (1.58/2 bits): ``∂L/∂W = 1[|x| ≤ 0.99]·G``; ``∂L/∂α = Σ_row g·G·{∓Qp | Q(x) − x}`` with
      ``Qp = (n − s)/n``: 1 for ternary (the official quirk; the output saturates at 2/3, so
      ``ternary_alpha_grad="exact"`` uses 2/3) and 3/4 for 2 bits.

    Args:
        w: ``(out, in)``; alpha: ``(out, 1)``; grad_output: ``(out, in)``.
        bits: 1, 1.58, 2, 3 or 4.
        ternary_alpha_grad: ``"paretoq"`` (official) or ``"exact"``.

    Returns:
        ``(grad_w, grad_alpha)`` shaped like ``w`` and ``alpha``.
    """
    a = _clamped_alpha(alpha)
    x = w / a
    g = grad_scale(w.numel(), bits)
    if bits == 1:
        lo, hi = -1.0, 1.0
        inside = (x >= lo) & (x <= hi)
        per_elem = torch.sign(w)
    elif bits in (1.58, 2):
        n, s = _seq_params(bits)
        qp = (n - s) / n
        if bits == 1.58 and ternary_alpha_grad == "exact":
            qp = 2.0 / 3.0
        inside = (x >= -SEQ_CLIP) & (x <= SEQ_CLIP)
        per_elem = torch.where(
            x < -SEQ_CLIP,
            torch.full_like(x, -qp),
            torch.where(x > SEQ_CLIP, torch.full_like(x, qp), _q_of_x(x, bits) - x),
        )
    else:
        qn, qp = -(2 ** (int(bits) - 1)), 2 ** (int(bits) - 1) - 1
        inside = (x >= qn) & (x <= qp)
        per_elem = torch.where(
            x < qn,
            torch.full_like(x, qn),
            torch.where(x > qp, torch.full_like(x, qp), torch.round(x) - x),
        )
    grad_w = torch.where(inside, grad_output, torch.zeros_like(grad_output))
    grad_alpha = (g * per_elem * grad_output).sum(dim=-1, keepdim=True)
    return grad_w, grad_alpha


def _round_ste(y: torch.Tensor) -> torch.Tensor:
    return y + (torch.round(y) - y).detach()


def _scale_grad(alpha: torch.Tensor, g: float) -> torch.Tensor:
    """Value ``alpha``, gradient multiplied by ``g`` (LSQ's ``grad_scale`` trick)."""
    return (alpha - alpha * g).detach() + alpha * g


def quantize_autograd_reference(w: torch.Tensor, alpha: torch.Tensor, bits: float) -> torch.Tensor:
    """The same quantizer written with ``round_ste`` so that plain autograd yields the gradients.

    This is a second, independent derivation of the gradients (LSQ's formulation): for 3/4 bits and
    2-bit SEQ it reproduces the official gradients; for ternary it gives the *exact* α-derivative
    (saturation at ±2/3), i.e. ``ternary_alpha_grad="exact"``; for 1 bit it reproduces the official
    rule (α sees ``sign(W)``, W sees the clipped identity).

    Args:
        w: ``(out, in)`` with ``requires_grad`` as wanted; alpha: ``(out, 1)``.
        bits: 1, 1.58, 2, 3 or 4.

    Returns:
        ``W_q`` of shape ``(out, in)``, differentiable in ``w`` and ``alpha``.
    """
    g = grad_scale(w.numel(), bits)
    # The clamp at ALPHA_EPS must not block the gradient (the official code passes it through).
    a_val = _clamped_alpha(alpha.detach())
    a = _scale_grad(alpha + (a_val - alpha).detach(), g)
    if bits == 1:
        x = w / a.detach()
        x_clipped = torch.clamp(x, -1.0, 1.0)
        sign_w = torch.sign(w).detach()
        # value α·sign(W); ∂/∂α = sign(W); ∂/∂W = 1[|x| ≤ 1] (straight through the clipped identity).
        return a * sign_w + a.detach() * (x_clipped - x_clipped.detach())
    x = w / a
    if bits in (1.58, 2):
        n, s = _seq_params(bits)
        return a * (_round_ste(torch.clamp(x, -SEQ_CLIP, SEQ_CLIP) * n - s) + s) / n
    qn, qp = -(2 ** (int(bits) - 1)), 2 ** (int(bits) - 1) - 1
    return a * _round_ste(torch.clamp(x, qn, qp))


def alpha_init_reference(w: torch.Tensor, bits: float) -> torch.Tensor:
    """The official per-row α initialisation (``train.py``), shape ``(out, 1)``.

    1 bit: ``mean|W|``; 1.58 and 2 bits: ``max|W|``; 3/4 bits: ``max|W| / (2^(b−1) − 1)``.
    """
    if bits == 1:
        return w.abs().mean(dim=-1, keepdim=True)
    if bits in (1.58, 2):
        return w.abs().amax(dim=-1, keepdim=True)
    return w.abs().amax(dim=-1, keepdim=True) / (2 ** (int(bits) - 1) - 1)


# ----------------------------------------------------------------------------- packing reference


def pack_codes_reference(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integer codes ``(N, K)`` in ``[0, 2^bits)`` into int32 words, planar along K.

    With ``v = 32 / bits`` codes per word and ``W = K / v`` words per row (K a multiple of v), code
    ``k = i·W + j`` sits in word ``j`` at bit offset ``i·bits``. Written as an explicit loop.
    """
    n_rows, k = codes.shape
    v = 32 // bits
    words_per_row = k // v
    out = torch.zeros(n_rows, words_per_row, dtype=torch.int64)
    c = codes.to(torch.int64).cpu()
    for i in range(v):
        out |= c[:, i * words_per_row : (i + 1) * words_per_row] << (i * bits)
    out = torch.where(out >= 2**31, out - 2**32, out)
    return out.to(torch.int32)


def unpack_codes_reference(words: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`pack_codes_reference`: int32 ``(N, W)`` → int64 codes ``(N, W · 32/bits)``."""
    v = 32 // bits
    w64 = words.to(torch.int64).cpu() & 0xFFFFFFFF
    mask = (1 << bits) - 1
    return torch.cat([(w64 >> (i * bits)) & mask for i in range(v)], dim=1)
