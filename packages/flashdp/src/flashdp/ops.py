"""Public ops of flashdp: argument checks and backend dispatch.

``clipped_linear_weight_grad(x, grad_out, C)`` returns ``Σᵢ cᵢ Gᵢᵀ Xᵢ`` with
``cᵢ = min(1, C / (‖Gᵢᵀ Xᵢ‖_F + ξ))``: each per-sample weight gradient is formed once, chunk by
chunk, and never written out for the whole batch.

Backends:
    ``"reference"``: float64 per-sample autograd (:mod:`flashdp.reference`).
    ``"torch"``: chunked einsum, the CPU path (:mod:`flashdp.clipping`).
    ``"triton"``: the streamed two-phase kernels (:mod:`flashdp.kernels`).
    ``"explicit"`` / ``"ghost"``: the baselines of :mod:`flashdp.baselines`.
Default: ``"triton"`` on CUDA tensors when Triton is importable, otherwise ``"torch"``.
"""

from __future__ import annotations

import math
import numbers

import torch

BACKENDS = ("reference", "torch", "triton", "explicit", "ghost")


def check_max_norm(max_norm: float, name: str = "max_norm") -> float:
    """A finite positive number, or a clear error naming ``name``."""
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise TypeError(f"{name}: expected a positive number, got {type(max_norm).__name__}")
    if not (math.isfinite(max_norm) and max_norm > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {max_norm}")
    return float(max_norm)


def check_chunk_bytes(chunk_bytes: int | None) -> int | None:
    if chunk_bytes is None:
        return None
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, numbers.Integral):
        raise TypeError(f"chunk_bytes: expected an int or None, got {type(chunk_bytes).__name__}")
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes: expected >= 1, got {chunk_bytes}")
    return int(chunk_bytes)


def check_backend(backend: str | None) -> str | None:
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend: expected None or one of {BACKENDS}, got {backend!r}")
    return backend


def _check_linear_inputs(x: torch.Tensor, grad_out: torch.Tensor) -> None:
    for name, t in (("x", x), ("grad_out", grad_out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating-point tensor, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name}: expected at least 2 dims (B, ..., features), got shape {tuple(t.shape)}"
            )
    if x.device != grad_out.device:
        raise ValueError(f"grad_out: on {grad_out.device}, expected the device of x ({x.device})")
    if x.dim() != grad_out.dim():
        raise ValueError(
            f"grad_out: expected {x.dim()} dims like x {tuple(x.shape)}, got {tuple(grad_out.shape)}"
        )
    if x.shape[0] != grad_out.shape[0]:
        raise ValueError(
            f"grad_out: batch size B={grad_out.shape[0]} differs from x's B={x.shape[0]}"
        )
    if x.shape[1:-1] != grad_out.shape[1:-1]:
        raise ValueError(
            f"grad_out: token dims T={tuple(grad_out.shape[1:-1])} differ from x's "
            f"T={tuple(x.shape[1:-1])}"
        )


def resolve_backend(backend: str | None, device: torch.device) -> str:
    """The backend an op runs: ``backend`` when given, else triton on CUDA, else torch."""
    check_backend(backend)
    if backend is not None:
        return backend
    if device.type == "cuda":
        from neurips25_core.device import triton_available

        if triton_available():
            return "triton"
    return "torch"


def clipped_linear_weight_grad(
    x: torch.Tensor,
    grad_out: torch.Tensor,
    max_norm: float,
    *,
    eps: float = 1e-6,
    backend: str | None = None,
    chunk_bytes: int | None = None,
    return_norms: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The per-sample clipped weight gradient sum of a linear layer ``y = x Wᵀ + b``.

    Args:
        x: (B, T, N) layer input; 2-D (B, N) means T = 1; more dims flatten into T.
        grad_out: (B, T, M) gradient of the summed per-sample losses w.r.t. the output.
        max_norm: the clipping threshold C > 0.
        eps: ξ in ``min(1, C / (‖g‖ + ξ))`` (Opacus's 1e-6).
        backend: ``"reference"``, ``"torch"``, ``"triton"``, ``"explicit"``, ``"ghost"`` or
            None (triton on CUDA, torch otherwise).
        chunk_bytes: scratch budget for the per-sample chunk (default 2·|W| in fp32 bytes).
        return_norms: also return the (B,) fp32 per-sample norms.

    Returns:
        (M, N) ``Σᵢ cᵢ Gᵢᵀ Xᵢ`` in float32 (float64 for float64 inputs), and the norms if asked.

    Example:
        >>> x, g = torch.randn(4, 6, 3), torch.randn(4, 6, 5)
        >>> clipped_linear_weight_grad(x, g, max_norm=1.0).shape
        torch.Size([5, 3])
        >>> w, norms = clipped_linear_weight_grad(x, g, 1.0, return_norms=True)
        >>> bool(w.flatten().norm() <= 4 * (1 + 1e-6))
        True
    """
    _check_linear_inputs(x, grad_out)
    max_norm = check_max_norm(max_norm)
    chunk_bytes = check_chunk_bytes(chunk_bytes)
    which = resolve_backend(backend, x.device)
    if which == "reference":
        from . import reference

        out = reference.clipped_linear_weight_grad(x, grad_out, max_norm, eps)
        norms = reference.per_sample_norms(x, grad_out)
    elif which == "torch":
        from .clipping import clipped_weight_grad_chunked

        out, norms = clipped_weight_grad_chunked(x, grad_out, max_norm, eps, chunk_bytes)
    elif which == "triton":
        from .kernels import clipped_weight_grad_triton

        out, norms = clipped_weight_grad_triton(x, grad_out, max_norm, eps, chunk_bytes)
    else:
        from . import baselines

        fn = {
            "explicit": baselines.explicit_clipped_weight_grad,
            "ghost": baselines.ghost_clipped_weight_grad,
        }
        dtype = torch.float64 if torch.float64 in (x.dtype, grad_out.dtype) else torch.float32
        out = fn[which](x.to(dtype), grad_out.to(dtype), max_norm, eps)
        norms = None
        if return_norms:
            norms = baselines.ghost_norms(x.to(dtype), grad_out.to(dtype))
    return (out, norms) if return_norms else out


def per_sample_norms(
    x: torch.Tensor,
    grad_out: torch.Tensor,
    *,
    backend: str | None = None,
    chunk_bytes: int | None = None,
) -> torch.Tensor:
    """(B,) Frobenius norms ``‖Gᵢᵀ Xᵢ‖_F`` of the per-sample weight gradients.

    Args:
        x: (B, T, N) (2-D: T = 1; more dims flatten).
        grad_out: (B, T, M).
        backend: as :func:`clipped_linear_weight_grad`.
        chunk_bytes: scratch budget per chunk of samples.

    Example:
        >>> x, g = torch.ones(2, 1, 3), torch.ones(2, 1, 4)
        >>> per_sample_norms(x, g)
        tensor([3.4641, 3.4641])
    """
    _check_linear_inputs(x, grad_out)
    chunk_bytes = check_chunk_bytes(chunk_bytes)
    which = resolve_backend(backend, x.device)
    if which == "reference":
        from . import reference

        return reference.per_sample_norms(x, grad_out)
    if which in ("explicit", "ghost"):
        from . import baselines

        dtype = torch.float64 if torch.float64 in (x.dtype, grad_out.dtype) else torch.float32
        return baselines.ghost_norms(x.to(dtype), grad_out.to(dtype))
    if which == "triton":
        from .kernels import clipped_weight_grad_triton

        return clipped_weight_grad_triton(x, grad_out, 1.0, 1e-6, chunk_bytes, norms_only=True)[1]
    from .clipping import per_sample_norms_chunked

    return per_sample_norms_chunked(x, grad_out, chunk_bytes)


def clipped_per_sample_sum(
    per_sample: torch.Tensor, max_norm: float, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σᵢ cᵢ gᵢ, ‖gᵢ‖)`` for small per-sample tensors (B, ...) such as bias gradients."""
    acc = torch.float64 if per_sample.dtype == torch.float64 else torch.float32
    g = per_sample.to(acc)
    norms = g.flatten(1).norm(dim=1)
    c = (max_norm / (norms + eps)).clamp(max=1.0)
    return torch.einsum("b,b...->...", c, g), norms
