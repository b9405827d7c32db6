"""Public ops of dlgn: argument checks and backend dispatch of the logic layer."""

from __future__ import annotations

import torch

from neurips25_core.device import triton_usable, use_triton_for

from .functional import logic_layer_torch

__all__ = ["BACKENDS", "logic_layer", "resolve_backend"]

BACKENDS = ("auto", "torch", "triton", "reference")


def resolve_backend(backend: str, x: torch.Tensor) -> str:
    """``auto`` → ``triton`` for CUDA tensors when Triton works, else ``torch``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if use_triton_for(x) else "torch"
    if backend == "triton" and not triton_usable():
        raise ValueError("backend: 'triton' needs a CUDA GPU or TRITON_INTERPRET=1, got neither")
    return backend


def logic_layer(
    x: torch.Tensor,
    ia: torch.Tensor,
    ib: torch.Tensor,
    w: torch.Tensor,
    backend: str = "auto",
) -> torch.Tensor:
    """One logic layer: ``y[:, n] = Σ_i w[n, i]·h_i(x[:, ia[n]], x[:, ib[n]])``.

    Args:
        x: (B, in) float inputs.
        ia: (out,) int64 first-input indices in [0, in).
        ib: (out,) int64 second-input indices in [0, in).
        w: (out, 16) gate weights (softmax, one-hot, ...).
        backend: ``auto`` | ``torch`` | ``triton`` | ``reference`` (the dense float sum).

    Returns:
        (B, out), differentiable in ``x`` and ``w``.

    Example:
        >>> x = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
        >>> w = torch.nn.functional.one_hot(torch.tensor([6, 1]), 16).float()  # XOR, AND
        >>> logic_layer(x, torch.tensor([0, 0]), torch.tensor([1, 1]), w).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x: expected a floating dtype, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x: expected shape (B, in), got {tuple(x.shape)}")
    for name, idx in (("ia", ia), ("ib", ib)):
        if idx.dtype != torch.int64 or idx.ndim != 1:
            raise TypeError(
                f"{name}: expected a 1-D int64 tensor, got {idx.dtype} {tuple(idx.shape)}"
            )
    if ia.shape != ib.shape:
        raise ValueError(f"ib: expected shape {tuple(ia.shape)}, got {tuple(ib.shape)}")
    if w.shape != (ia.shape[0], 16):
        raise ValueError(f"w: expected shape ({ia.shape[0]}, 16), got {tuple(w.shape)}")
    backend = resolve_backend(backend, x)
    if backend == "torch":
        return logic_layer_torch(x, ia, ib, w)
    if backend == "reference":
        from .reference import dense_layer

        return dense_layer(x, ia, ib, w.to(x.dtype))
    from .kernels.logic import logic_layer_triton

    return logic_layer_triton(x, ia, ib, w)
