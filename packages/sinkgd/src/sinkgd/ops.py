"""Public ops of sinkgd: argument checks and backend dispatch for SR-Sinkhorn."""

from __future__ import annotations

import numbers

import torch

from neurips25_core.device import triton_available, triton_interpret, use_triton_for

from . import reference
from .sinkhorn import sr_sinkhorn_torch

__all__ = ["BACKENDS", "check_eps", "check_num_iters", "sr_sinkhorn"]

BACKENDS = ("auto", "torch", "triton", "reference")
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_num_iters(num_iters: object, name: str = "num_iters") -> int:
    """``num_iters`` must be an int ≥ 1 (bool rejected)."""
    if isinstance(num_iters, bool) or not isinstance(num_iters, numbers.Integral):
        raise TypeError(
            f"{name}: expected an int >= 1, got {type(num_iters).__name__} {num_iters!r}"
        )
    if num_iters < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {num_iters}")
    return int(num_iters)


def check_eps(eps: object, name: str = "eps") -> float:
    """``eps`` must be a finite float > 0."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name}: expected a float > 0, got {type(eps).__name__} {eps!r}")
    if not (eps > 0 and eps < float("inf")):
        raise ValueError(f"{name}: expected a finite float > 0, got {eps}")
    return float(eps)


def sr_sinkhorn(
    grad: torch.Tensor,
    num_iters: int = 5,
    eps: float = 1e-8,
    backend: str = "auto",
) -> torch.Tensor:
    """Square-root Sinkhorn normalisation (paper Alg. 3), batched over leading dimensions.

    Alternately rescales every row of each ``(m, n)`` matrix to ℓ2 norm √n and every column to √m,
    ``num_iters`` times. The result is ``diag(r) G diag(c)``: sign-preserving, invariant to the scale
    of ``G``, with column norms exactly √m, Frobenius norm √(mn) (entry RMS one) and row norms
    converging geometrically to √n. Zero rows and columns stay zero (no NaN).

    Args:
        grad: ``(..., m, n)`` floating tensor.
        num_iters: L ≥ 1, the number of (row, column) normalisation pairs.
        eps: lower clamp of the norms, > 0.
        backend: ``"auto"`` (Triton on CUDA tensors, torch otherwise), ``"torch"``, ``"triton"``
            (also CPU tensors under ``TRITON_INTERPRET=1``) or ``"reference"`` (the plain loop,
            one matrix at a time, in ``grad``'s dtype).

    Returns:
        ``(..., m, n)`` tensor in ``grad``'s dtype; accumulation is in float32 (float64 for
        float64 input).

    Example:
        >>> import torch, sinkgd
        >>> x = sinkgd.sr_sinkhorn(torch.randn(4, 6))
        >>> torch.allclose(x.norm(dim=0), torch.full((6,), 2.0))
        True
    """
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"grad: expected a torch.Tensor, got {type(grad).__name__}")
    if not grad.is_floating_point():
        raise TypeError(f"grad: expected a floating-point tensor, got dtype {grad.dtype}")
    if grad.ndim < 2:
        raise ValueError(
            f"grad: expected a (..., m, n) tensor with ndim >= 2, got shape {tuple(grad.shape)}"
        )
    num_iters = check_num_iters(num_iters)
    eps = check_eps(eps)
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if grad.layout != torch.strided:
        raise TypeError(f"grad: expected a dense (strided) tensor, got layout {grad.layout}")
    if grad.numel() == 0:
        return grad.clone()
    if backend == "auto":
        backend = "triton" if use_triton_for(grad) and grad.dtype in _TRITON_DTYPES else "torch"
    if backend == "torch":
        return sr_sinkhorn_torch(grad, num_iters, eps)
    if backend == "reference":
        flat = grad.reshape(-1, *grad.shape[-2:])
        if flat.shape[0] == 0:
            return grad.clone()
        out = torch.stack([reference.sr_sinkhorn(x, num_iters, eps) for x in flat])
        return out.reshape(grad.shape)
    if not triton_available():
        raise ValueError("backend: 'triton' requested but triton is not installed")
    if not grad.is_cuda and not triton_interpret():
        raise ValueError(
            f"backend: 'triton' needs a CUDA tensor (or TRITON_INTERPRET=1), got device {grad.device}"
        )
    if grad.dtype not in _TRITON_DTYPES:
        raise TypeError(
            f"grad: backend 'triton' supports float32/bfloat16/float16, got {grad.dtype}"
        )
    from .kernels.sinkhorn import sr_sinkhorn_triton

    return sr_sinkhorn_triton(grad, num_iters, eps)
