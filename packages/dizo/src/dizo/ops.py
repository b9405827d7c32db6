"""Public ops of dizo: argument checks and backend dispatch.

Each op takes ``backend=`` (``None``: Triton on CUDA tensors, torch otherwise; or ``"torch"``,
``"triton"``, ``"reference"``). The torch and reference backends draw the same z stream (see
:mod:`dizo.reference`); Triton draws Philox ``tl.randn(seed, offset)``: streams differ across
backends, so compare within one.

>>> import torch
>>> from dizo.ops import perturb_
>>> w = [torch.zeros(3), torch.zeros(2, 2)]
>>> perturb_(w, seed=7, scale=1e-3)
>>> perturb_(w, seed=7, scale=-1e-3)
>>> float(w[0].abs().max()) < 1e-9
True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import reference

_BACKENDS = (None, "torch", "triton", "reference")
_MAX_SEED = 2**31 - 1


def _check_tensors(tensors, name="tensors") -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        raise TypeError(f"{name}: expected a sequence of tensors, got a single tensor")
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}[{i}]: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name}[{i}]: expected a floating-point tensor, got {t.dtype}")
    return tensors


def _resolve(backend, tensors) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
    if backend is None:
        from neurips25_core.device import use_triton_for

        return (
            "triton"
            if tensors and all(use_triton_for(t) for t in tensors) and tensors[0].is_cuda
            else "torch"
        )
    if backend == "triton":
        for i, t in enumerate(tensors):
            if not t.is_contiguous():
                raise ValueError(f"tensors[{i}]: the triton backend needs contiguous tensors")
    return backend


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed: expected an int in [0, 2**31 - 1], got {seed!r}")


def perturb_(
    tensors: Sequence[torch.Tensor], seed: int, scale: float, backend: str | None = None
) -> None:
    """In place ``t += scale * z`` for every tensor, z regenerated from ``seed`` (never stored).

    The torch backend draws z tensor by tensor from a dedicated ``torch.Generator`` (the global RNG
    is untouched) and holds at most one tensor's z at a time; Triton never materialises z.
    """
    tensors = _check_tensors(tensors)
    _check_seed(seed)
    scale = float(scale)
    b = _resolve(backend, tensors)
    if b == "triton":
        from .kernels import zo

        zo.perturb_(tensors, seed, scale)
        return
    for i, t in enumerate(tensors):
        g = torch.Generator().manual_seed(reference.tensor_seed(seed, i))
        z = torch.randn(t.shape, generator=g, dtype=torch.float32)
        t.add_(z.to(t.device, t.dtype), alpha=scale)


def _check_pairs(tensors, anchors):
    tensors = _check_tensors(tensors)
    anchors = _check_tensors(anchors, "anchors")
    if len(anchors) != len(tensors):
        raise ValueError(f"anchors: expected {len(tensors)} tensors, got {len(anchors)}")
    for i, (t, a) in enumerate(zip(tensors, anchors)):
        if t.shape != a.shape:
            raise ValueError(f"anchors[{i}]: expected shape {tuple(t.shape)}, got {tuple(a.shape)}")
    return tensors, anchors


def project_(tensors, anchors, ratios, backend: str | None = None) -> None:
    """In place ``t = a + r * (t - a)``: keep each displacement's direction, rescale it by ``r``.

    A ratio of exactly 1 leaves the tensor bitwise unchanged. Anchors on another device (CPU
    offload) are copied over for the operation.
    """
    tensors, anchors = _check_pairs(tensors, anchors)
    ratios = [float(r) for r in ratios]
    if len(ratios) != len(tensors):
        raise ValueError(f"ratios: expected {len(tensors)} values, got {len(ratios)}")
    b = _resolve(backend, tensors)
    anchors = [a.to(t.device, t.dtype) for t, a in zip(tensors, anchors)]
    if b == "triton":
        from .kernels import zo

        zo.project_(tensors, anchors, ratios)
        return
    for t, a, r in zip(tensors, anchors, ratios):
        if r != 1.0:
            t.sub_(a).mul_(r).add_(a)


def displacement_norms(tensors, anchors, backend: str | None = None) -> torch.Tensor:
    """``||t - a||_2`` per tensor as a float64 CPU tensor (accumulated in fp32 or better)."""
    tensors, anchors = _check_pairs(tensors, anchors)
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    b = _resolve(backend, tensors)
    anchors = [a.to(t.device, t.dtype) for t, a in zip(tensors, anchors)]
    if b == "triton":
        from .kernels import zo

        return zo.displacement_norms(tensors, anchors)
    return torch.stack([(t - a).float().norm().double() for t, a in zip(tensors, anchors)]).cpu()
