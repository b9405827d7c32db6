"""Public ops of ParetoQ: argument checks, the quantizer autograd functions and backend dispatch.

The three quantizers follow the official code (facebookresearch/ParetoQ, ``models/utils_quant.py``):

- 1 bit: ``W_q = α·sign(W)``; α is initialised to ``mean|W|``.
- 1.58 (ternary) and 2 bits: Stretched Elastic Quant (SEQ), ``Q(x) = (round(clip(x, ±0.99)·n − s) + s)/n``
  with ``(n, s) = (1.5, 0)`` (levels ``{−2/3, 0, 2/3}``) or ``(2, 0.5)`` (levels ``{±1/4, ±3/4}``).
- 3 and 4 bits: LSQ, ``Q(x) = clamp(round(x), −2^(b−1), 2^(b−1) − 1)``.

Gradients are straight-through, with LSQ's gradient scale ``1/sqrt(numel(W)·Qp)`` on α. See
:mod:`paretoq.reference` for the closed forms.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from neurips25_core.device import triton_usable, use_triton_for
from paretoq.reference import ALPHA_EPS, SEQ_CLIP, SUPPORTED_BITS, grad_scale

__all__ = [
    "BACKENDS",
    "TERNARY_ALPHA_GRADS",
    "alpha_init",
    "bits_per_weight",
    "check_bits",
    "packed_matmul",
    "quantize_weight",
]

#: Accepted values of ``ternary_alpha_grad``.
TERNARY_ALPHA_GRADS = ("paretoq", "exact")
_ALL_BITS = (*SUPPORTED_BITS, 16)


def check_bits(bits: Any, name: str = "bits") -> float:
    """Validate a bit width and return it canonically (``1, 1.58, 2, 3, 4`` or ``16``).

    Raises:
        TypeError: ``bits`` is not a real number (``bool`` is rejected).
        ValueError: ``bits`` is not one of 1, 1.58, 2, 3, 4, 16.
    """
    if isinstance(bits, bool) or not isinstance(bits, (int, float)):
        raise TypeError(
            f"{name}: expected a number in {_ALL_BITS}, got {type(bits).__name__} {bits!r}"
        )
    if bits == 0:
        raise ValueError(
            f"{name}: got 0; ternary is spelled 1.58 here (the official code's w_bits=0)"
        )
    for b in _ALL_BITS:
        if bits == b:
            return b
    raise ValueError(f"{name}: expected one of {_ALL_BITS}, got {bits!r}")


def _check_ternary_alpha_grad(mode: Any) -> str:
    if mode not in TERNARY_ALPHA_GRADS:
        raise ValueError(f"ternary_alpha_grad: expected one of {TERNARY_ALPHA_GRADS}, got {mode!r}")
    return mode


def _check_weight_alpha(w: Any, alpha: Any, *, check_values: bool = True) -> None:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w: expected a torch.Tensor, got {type(w).__name__}")
    if w.dim() != 2:
        raise ValueError(
            f"w: expected a 2-D weight (out_features, in_features), got shape {tuple(w.shape)}"
        )
    if not w.is_floating_point():
        raise TypeError(f"w: expected a floating dtype, got {w.dtype}")
    if not isinstance(alpha, torch.Tensor):
        raise TypeError(
            f"alpha: expected a torch.Tensor of shape ({w.shape[0]}, 1), got {type(alpha).__name__}"
        )
    if tuple(alpha.shape) != (w.shape[0], 1):
        raise ValueError(
            f"alpha: expected shape ({w.shape[0]}, 1) (one scale per output row of w), got {tuple(alpha.shape)}"
        )
    if not alpha.is_floating_point():
        raise TypeError(f"alpha: expected a floating dtype, got {alpha.dtype}")
    if alpha.device != w.device:
        raise ValueError(f"alpha: expected device {w.device} (that of w), got {alpha.device}")
    if check_values and not bool(torch.isfinite(alpha).all()):
        raise ValueError("alpha: contains NaN or Inf")


def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype the α-gradient is built and summed in: fp32 for bf16/fp16, else the tensor's own.

    The official code builds it in fp32 (its ``.float()`` masks promote the products); building it
    in bf16 loses up to 2× accuracy at 3/4 bits, where ``round(x) − x`` is a small difference of
    numbers up to 2^(b−1).
    """
    return torch.float32 if t.dtype in (torch.bfloat16, torch.float16) else t.dtype


def _alpha_grad(per_elem: torch.Tensor, grad_out: torch.Tensor, g: float, like: torch.Tensor):
    acc = _acc_dtype(grad_out)
    total = (per_elem.to(acc) * grad_out.to(acc) * g).sum(dim=-1, keepdim=True)
    return total.to(like.dtype)


def _clamp_alpha(alpha: torch.Tensor) -> torch.Tensor:
    # Official: torch.where(alpha > eps, alpha, eps); clamp gives the same values (and NaN stays NaN).
    return torch.clamp(alpha, min=ALPHA_EPS)


class _BinaryQuant(torch.autograd.Function):
    """1 bit: ``α·sign(W)``; ``∂W = 1[|W/α| ≤ 1]·G``, ``∂α = Σ_row g·sign(W)·G``."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        a = _clamp_alpha(alpha)
        ctx.save_for_backward(w, a)
        return torch.sign(w) * a

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        w, a = ctx.saved_tensors
        g = grad_scale(w.numel(), 1)
        x = w / a
        inside = (x >= -1.0) & (x <= 1.0)
        grad_w = grad_out * inside.to(grad_out.dtype)
        grad_alpha = _alpha_grad(torch.sign(w), grad_out, g, a)
        return grad_w, grad_alpha


class _LsqQuant(torch.autograd.Function):
    """3/4 bits: ``α·clamp(round(W/α), Qn, Qp)`` with LSQ's straight-through gradients."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, alpha: torch.Tensor, bits: int) -> torch.Tensor:
        a = _clamp_alpha(alpha)
        qn, qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        ctx.save_for_backward(w, a)
        ctx.bits = bits
        return torch.clamp(torch.round(w / a), qn, qp) * a

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        w, a = ctx.saved_tensors
        bits = ctx.bits
        qn, qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        g = grad_scale(w.numel(), bits)
        x = w / a  # in w's dtype: the masks and the rounding are the forward's
        small, big = x < qn, x > qp
        middle = ~(small | big)
        acc = _acc_dtype(x)
        xa = x if acc == x.dtype else w.to(acc) / a.to(acc)
        sat = torch.where(small, torch.full_like(xa, qn), torch.full_like(xa, qp))
        per_elem = torch.where(middle, torch.round(x).to(acc) - xa, sat)
        grad_alpha = _alpha_grad(per_elem, grad_out, g, a)
        grad_w = grad_out * middle.to(grad_out.dtype)
        return grad_w, grad_alpha, None


class _StretchedElasticQuant(torch.autograd.Function):
    """1.58/2 bits: SEQ, equal bins over ``[−α, α]`` with levels at the bin centres."""

    @staticmethod
    def forward(
        ctx, w: torch.Tensor, alpha: torch.Tensor, bits: float, exact: bool
    ) -> torch.Tensor:
        a = _clamp_alpha(alpha)
        n, s = (1.5, 0.0) if bits == 1.58 else (2.0, 0.5)
        ctx.save_for_backward(w, a)
        ctx.bits, ctx.exact = bits, exact
        q = (torch.round(torch.clamp(w / a, -SEQ_CLIP, SEQ_CLIP) * n - s) + s) / n
        return q * a

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        w, a = ctx.saved_tensors
        bits, exact = ctx.bits, ctx.exact
        n, s = (1.5, 0.0) if bits == 1.58 else (2.0, 0.5)
        # Official Qp = (n − s)/n: 1 for ternary although the output saturates at 2/3 (the quirk).
        qp = 2.0 / 3.0 if (bits == 1.58 and exact) else (n - s) / n
        g = grad_scale(w.numel(), bits)
        x = w / a  # in w's dtype: the masks and the rounding are the forward's
        small, big = x < -SEQ_CLIP, x > SEQ_CLIP
        middle = ~(small | big)
        acc = _acc_dtype(x)
        q = (torch.round(torch.clamp(x, -SEQ_CLIP, SEQ_CLIP) * n - s).to(acc) + s) / n
        xa = x if acc == x.dtype else w.to(acc) / a.to(acc)
        # Scalars in torch.where would make a float32 tensor: build the saturated values in xa's dtype.
        sat = torch.where(small, torch.full_like(xa, -qp), torch.full_like(xa, qp))
        per_elem = torch.where(middle, q - xa, sat)
        grad_alpha = _alpha_grad(per_elem, grad_out, g, a)
        grad_w = grad_out * middle.to(grad_out.dtype)
        return grad_w, grad_alpha, None, None


def _quantize_unchecked(
    w: torch.Tensor, alpha: torch.Tensor | None, bits: float, exact: bool
) -> torch.Tensor:
    if bits >= 16:
        return w
    if bits == 1:
        return _BinaryQuant.apply(w, alpha)
    if bits in (1.58, 2):
        return _StretchedElasticQuant.apply(w, alpha, bits, exact)
    return _LsqQuant.apply(w, alpha, int(bits))


def quantize_weight(
    w: torch.Tensor,
    alpha: torch.Tensor | None,
    bits: float,
    *,
    ternary_alpha_grad: str = "paretoq",
) -> torch.Tensor:
    """ParetoQ's weight quantizer ``W_q = α·Q(W/α)`` with straight-through gradients for W and α.

    Args:
        w: latent full-precision weight, shape ``(out_features, in_features)``, floating.
        alpha: learnable per-row scale, shape ``(out_features, 1)``, same device as ``w``; clamped
            to ``≥ 1e-5`` in the forward (its gradient is not masked by the clamp, as in the
            official code). Ignored (may be ``None``) when ``bits == 16``.
        bits: 1, 1.58 (ternary), 2, 3 or 4; 16 returns ``w`` unchanged.
        ternary_alpha_grad: ``"paretoq"`` (default, the official code: the saturated-region
            α-gradient of ternary is ±1, 1.5× the true derivative) or ``"exact"`` (±2/3).

    Returns:
        ``W_q``, shape and dtype of ``w``.

    Raises:
        ValueError: unsupported ``bits``, ``w`` not 2-D, ``alpha`` not ``(out, 1)`` or not finite.
        TypeError: non-tensor or non-floating inputs.

    Example:
        >>> import torch, paretoq
        >>> w = torch.randn(4, 8)
        >>> alpha = paretoq.alpha_init(w, 2)
        >>> paretoq.quantize_weight(w, alpha, 2).shape
        torch.Size([4, 8])
    """
    bits = check_bits(bits)
    mode = _check_ternary_alpha_grad(ternary_alpha_grad)
    if bits >= 16:
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"w: expected a torch.Tensor, got {type(w).__name__}")
        return w
    _check_weight_alpha(w, alpha)
    return _quantize_unchecked(w, alpha, bits, mode == "exact")


def alpha_init(w: torch.Tensor, bits: float) -> torch.Tensor:
    """The official per-row α initialisation for ``bits`` (``train.py``), shape ``(out, 1)``.

    1 bit: ``mean|W|``; 1.58 and 2 bits: ``max|W|``; 3 and 4 bits: ``max|W| / (2^(b−1) − 1)``.

    Args:
        w: weight, shape ``(out_features, in_features)``.
        bits: 1, 1.58, 2, 3 or 4.

    Returns:
        A detached tensor of shape ``(out_features, 1)`` with ``w``'s dtype and device.
    """
    bits = check_bits(bits)
    if bits >= 16:
        raise ValueError("bits: 16 has no scale to initialise")
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"w: expected a 2-D tensor, got {getattr(w, 'shape', type(w).__name__)}")
    w = w.detach()
    if bits == 1:
        return w.abs().mean(dim=-1, keepdim=True)
    amax = w.abs().amax(dim=-1, keepdim=True)
    if bits in (1.58, 2):
        return amax
    return amax / (2 ** (int(bits) - 1) - 1)


def bits_per_weight(bits: float) -> float:
    """Information content per weight: ``log2(3)`` for ternary, ``bits`` otherwise."""
    return math.log2(3) if bits == 1.58 else float(bits)


BACKENDS = ("auto", "triton", "numba", "torch", "reference")


def packed_matmul(
    x: torch.Tensor,
    planes: list[torch.Tensor],
    scale: torch.Tensor,
    bits: float,
    in_features: int,
    bias: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    layout: Any = None,
) -> torch.Tensor:
    """``y = x · dequant(W)ᵀ + bias`` from int32-packed codes (see :mod:`paretoq.packing`).

    Args:
        x: activations ``(..., in_features)``; fp32/bf16/fp16 (fp64 on the torch paths).
        planes: the packed int32 planes of the weight, each ``(out, K_pad·b_p/32)``.
        scale: per-row scale ``(out,)``.
        bits: 1, 1.58, 2, 3 or 4.
        in_features: K (the unpadded input width).
        bias: optional ``(out,)``.
        backend: ``"auto"`` (Triton on CUDA tensors; on CPU numba when it is installed, x is not
            float64 and no gradient is needed, else torch), ``"triton"``, ``"numba"`` (the CPU
            byte-lookup kernel of :mod:`paretoq.cpu`, the ``cpu`` extra; float32 accumulation,
            ``torch.get_num_threads()`` threads, inference only), ``"torch"``
            (unpack one shift at a time, fp32 accumulation) or ``"reference"`` (dequantize the
            whole weight, then ``x @ Wᵀ``).
        layout: a cached :class:`paretoq.cpu.CpuLayout` of these planes (numba; derived when None).

    Returns:
        ``(..., out)`` in ``x``'s dtype. Not differentiable on the Triton path (inference).
    """
    from paretoq import packing

    bits = check_bits(bits)
    specs = packing.plane_specs(bits)
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(
            f"x: expected a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}"
        )
    if x.dim() < 1 or x.shape[-1] != in_features:
        raise ValueError(
            f"x: expected last dimension {in_features} (in_features), got shape {tuple(x.shape)}"
        )
    if len(planes) != len(specs):
        raise ValueError(
            f"planes: {bits}-bit weights have {len(specs)} plane(s), got {len(planes)}"
        )
    kp = packing.padded_k(in_features)
    for (pb, _, _), p in zip(specs, planes):
        if p.dtype != torch.int32 or p.dim() != 2 or p.shape != (scale.shape[0], kp * pb // 32):
            raise ValueError(
                f"planes: expected int32 of shape ({scale.shape[0]}, {kp * pb // 32}) for a {pb}-bit plane, "
                f"got {p.dtype} {tuple(p.shape)}"
            )
    if backend == "auto":
        from paretoq.cpu import numba_available

        needs_grad = torch.is_grad_enabled() and x.requires_grad
        if use_triton_for(x) and x.dtype != torch.float64:
            backend = "triton"
        elif (
            x.device.type == "cpu"
            and x.dtype != torch.float64
            and not needs_grad
            and numba_available()
        ):
            backend = "numba"
        else:
            backend = "torch"
    if backend == "numba":
        from paretoq.cpu import cpu_layout, numba_available, packed_matmul_cpu

        if x.device.type != "cpu" or x.dtype == torch.float64:
            raise TypeError(
                f"x: backend='numba' takes CPU float32/bfloat16/float16, got {x.dtype} on {x.device}"
            )
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("x: backend='numba' is inference-only; call it under torch.no_grad()")
        if not numba_available():
            raise RuntimeError("backend='numba' needs numba: pip install 'paretoq[cpu]'")
        if layout is None:
            layout = cpu_layout(planes, scale, bits)
        lead = x.shape[:-1]
        y = packed_matmul_cpu(x.reshape(-1, in_features), layout)
        if bias is not None:
            y = y + bias.to(y.dtype)
        return y.to(x.dtype).reshape(*lead, scale.shape[0])
    if backend == "reference":
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        w = packing.dequantize_packed(planes, scale, bits, in_features, dtype=cdt)
        y = x.to(cdt) @ w.T
        if bias is not None:
            y = y + bias.to(cdt)
        return y.to(x.dtype)
    if backend == "torch":
        return packing.packed_matmul_torch(x, planes, scale, bits, in_features, bias)
    if not triton_usable():
        raise RuntimeError("backend='triton' needs triton and a CUDA GPU or TRITON_INTERPRET=1")
    if x.dtype == torch.float64:
        raise TypeError(
            "x: the Triton packed matmul supports float32/bfloat16/float16, got float64"
        )
    if torch.is_grad_enabled() and x.requires_grad:
        raise ValueError(
            "x: the Triton packed matmul is inference-only; call it under torch.no_grad()"
        )
    from paretoq.kernels.packed_matmul import packed_matmul_triton

    lead = x.shape[:-1]
    x2 = x.reshape(-1, in_features)
    y = packed_matmul_triton(x2, list(planes), scale, specs, in_features, bias)
    return y.reshape(*lead, scale.shape[0])
