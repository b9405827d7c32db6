"""Testing helpers shared by every package.

The error measure is the relative norm error ``‖out − ref‖ / ‖ref‖`` (as in
flash-linear-attention), which is scale-free and does not explode on entries near zero. The default
tolerance depends on the lower-precision dtype of the two tensors (fp32: ``FP32_RTOL`` = 1e-5 for
torch and Triton paths alike; float64: 1e-10; bf16: 1.6e-2); a test never loosens it to pass.

Example (CPU):

    >>> import torch
    >>> from neurips25_core.testing import assert_close, randn
    >>> x = randn(3, 5, seed=0, dtype=torch.float64)
    >>> assert_close(x * 1.0, x)  # returns the measured relative error
    0.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "FP32_RTOL",
    "assert_close",
    "check_forward_backward",
    "default_rtol",
    "poisoned_empty",
    "poisoned_empty_like",
    "randint",
    "randn",
    "relative_error",
    "seeded_generator",
    "sqnr",
]

# Relative-norm tolerances by dtype (CONTRIBUTING.md, "Tolerances"): one fp32 default, 1e-5, which
# covers both torch fp32 paths and Triton fp32 kernels (native or under the interpreter) against a
# float64 reference. A path that is measured tighter (most torch fp32 paths reach ~1e-6) keeps its
# tighter explicit ``rtol``; a test never loosens a tolerance to pass.
FP32_RTOL = 1e-5
_RTOL = {
    torch.float64: 1e-10,
    torch.float32: FP32_RTOL,
    torch.complex128: 1e-10,
    torch.complex64: 1e-5,
    torch.float16: 5e-3,
    torch.bfloat16: 1.6e-2,
}


def default_rtol(dtype: torch.dtype) -> float:
    """The default relative-norm tolerance for results computed in ``dtype``."""
    if dtype not in _RTOL:
        raise TypeError(f"dtype: no default tolerance for {dtype}; pass rtol explicitly")
    return _RTOL[dtype]


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` computed in float64 (complex-aware). Zero ``ref`` gives ``‖out‖``."""
    if out.shape != ref.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} differs from ref {tuple(ref.shape)}")
    wide = torch.complex128 if (out.is_complex() or ref.is_complex()) else torch.float64
    o = out.detach().to("cpu", wide)
    r = ref.detach().to("cpu", wide)
    num = torch.linalg.vector_norm(o - r).item()
    den = torch.linalg.vector_norm(r).item()
    return num / den if den > 0 else num


def assert_close(
    out: torch.Tensor,
    ref: torch.Tensor,
    rtol: float | None = None,
    name: str = "output",
) -> float:
    """Assert ``‖out − ref‖/‖ref‖ <= rtol`` and that ``out`` has no NaN/Inf where ``ref`` has none.

    Args:
        out: the tensor under test, any shape.
        ref: the reference, same shape (typically computed in float64).
        rtol: relative-norm tolerance; default from the lower-precision dtype of the two.
        name: what is compared, for the message.

    Returns:
        The measured relative error, so tests can also log it.
    """
    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
        raise TypeError(
            f"{name}: expected tensors, got {type(out).__name__} and {type(ref).__name__}"
        )
    if rtol is None:
        lower = min(
            (out.dtype, ref.dtype),
            key=lambda d: torch.finfo(d).bits if d.is_floating_point or d.is_complex else 64,
        )
        rtol = default_rtol(lower) if lower in _RTOL else 0.0
    if out.shape != ref.shape:
        raise AssertionError(f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    bad_out = ~torch.isfinite(out.detach()) if out.is_floating_point() or out.is_complex() else None
    bad_ref = ~torch.isfinite(ref.detach()) if ref.is_floating_point() or ref.is_complex() else None
    if bad_out is not None and bool(bad_out.any()):
        n_bad = int(bad_out.sum())
        if bad_ref is None or bool((bad_out.cpu() & ~bad_ref.cpu()).any()):
            raise AssertionError(
                f"{name}: {n_bad} non-finite values (NaN/Inf) where the reference is finite; "
                f"shape {tuple(out.shape)}, dtype {out.dtype}"
            )
    err = relative_error(out, ref)
    if not err <= rtol:  # also catches NaN
        raise AssertionError(
            f"{name}: relative error {err:.3e} > rtol {rtol:.1e} "
            f"(shape {tuple(out.shape)}, dtype {out.dtype} vs reference {ref.dtype}, "
            f"max abs diff {(out.detach().double().cpu() - ref.detach().double().cpu()).abs().max().item() if not (out.is_complex() or ref.is_complex()) else float('nan'):.3e})"
        )
    return err


def sqnr(ref: torch.Tensor, approx: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB: ``20·log10(‖ref‖ / ‖ref − approx‖)`` (torchao's)."""
    err = relative_error(approx, ref)
    return math.inf if err == 0 else -20.0 * math.log10(err)


def seeded_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed`` on ``device``."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def randn(
    *shape: int,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    scale: float = 1.0,
    requires_grad: bool = False,
) -> torch.Tensor:
    """Seeded standard-normal tensor (drawn in float64 on CPU, so every dtype/device sees the same values)."""
    g = seeded_generator(seed)
    if dtype.is_complex:
        x = torch.complex(
            torch.randn(*shape, generator=g, dtype=torch.float64),
            torch.randn(*shape, generator=g, dtype=torch.float64),
        )
        x = x / math.sqrt(2)
    else:
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
    x = (x * scale).to(device=device, dtype=dtype)
    return x.requires_grad_(requires_grad)


def randint(
    low: int, high: int, *shape: int, seed: int = 0, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """Seeded int64 tensor with values in ``[low, high)``."""
    g = seeded_generator(seed)
    return torch.randint(low, high, shape, generator=g).to(device)


def poisoned_empty(
    *shape: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """An output buffer filled with NaN (or the most negative int) so unwritten entries are caught."""
    out = torch.empty(*shape, dtype=dtype, device=device)
    if dtype.is_floating_point or dtype.is_complex:
        out.fill_(float("nan"))
    elif dtype != torch.bool:
        out.fill_(torch.iinfo(dtype).min)
    return out


def poisoned_empty_like(t: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(t)`` filled with NaN (ints: the dtype's minimum)."""
    return poisoned_empty(*t.shape, dtype=t.dtype, device=t.device)


def _tree_tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tree_tensors(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _tree_tensors(item)]
    return []


def check_forward_backward(
    fn: Callable[..., Any],
    ref_fn: Callable[..., Any],
    inputs: Sequence[Any],
    rtol: float | None = None,
    grad_rtol: float | None = None,
    seed: int = 1234,
    ref_dtype: torch.dtype = torch.float64,
    names: Sequence[str] | None = None,
) -> dict[str, float]:
    """Compare ``fn(*inputs)`` with ``ref_fn`` on float64 copies, forward and backward.

    Floating-point tensor inputs with ``requires_grad=True`` are differentiated. The same random
    upstream gradient (seeded) is applied to every floating output of both. Non-tensor inputs and
    integer tensors are passed unchanged to both functions.

    Strict about gradients: where the reference's output carries a gradient and ``fn``'s does not
    (a detached output, a missing ``backward``), or where the reference has a gradient for an input
    and ``fn`` has none, it raises; nothing is silently left uncompared.

    Args:
        fn: the implementation under test.
        ref_fn: the reference (called on ``ref_dtype`` copies of the float inputs).
        inputs: positional inputs for both.
        rtol: forward tolerance (default from the output dtype).
        grad_rtol: gradient tolerance (default: ``rtol``'s default for each input's dtype).
        seed: seed of the upstream gradients.
        ref_dtype: the reference precision (float64; complex inputs go to complex128).
        names: names of the inputs, for messages.

    Returns:
        The relative errors measured, keyed ``"out0"``, ``"out1"``, …, ``"grad_<name>"``.
    """
    names = list(names) if names is not None else [f"input{i}" for i in range(len(inputs))]
    ref_inputs = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            wide = torch.complex128 if x.is_complex() else ref_dtype
            r = x.detach().to(wide).requires_grad_(x.requires_grad)
            ref_inputs.append(r)
        else:
            ref_inputs.append(x)
    out = _tree_tensors(fn(*inputs))
    ref = _tree_tensors(ref_fn(*ref_inputs))
    if len(out) != len(ref):
        raise AssertionError(f"fn returned {len(out)} tensors, ref_fn returned {len(ref)}")
    errors: dict[str, float] = {}
    for i, (o, r) in enumerate(zip(out, ref)):
        errors[f"out{i}"] = assert_close(o, r.to(o.device), rtol=rtol, name=f"output {i}")
    for i, (o, r) in enumerate(zip(out, ref)):
        if r.requires_grad and not o.requires_grad:
            raise AssertionError(
                f"output {i}: the reference is differentiable but fn's output does not require "
                "grad (detached, or computed without autograd); its gradient cannot be compared"
            )
    diff_out = [
        (o, r)
        for o, r in zip(out, ref)
        if (o.is_floating_point() or o.is_complex()) and o.requires_grad
    ]
    diff_in = [
        (n, x, r)
        for n, x, r in zip(names, inputs, ref_inputs)
        if isinstance(x, torch.Tensor) and x.requires_grad
    ]
    if diff_out and diff_in:
        g = seeded_generator(seed)
        grads_o, grads_r = [], []
        for o, r in diff_out:
            if o.is_complex():
                go = torch.complex(
                    torch.randn(o.shape, generator=g, dtype=torch.float64),
                    torch.randn(o.shape, generator=g, dtype=torch.float64),
                )
            else:
                go = torch.randn(o.shape, generator=g, dtype=torch.float64)
            grads_o.append(go.to(o.device, o.dtype))
            grads_r.append(go.to(r.device, r.dtype))
        gi = torch.autograd.grad(
            [o for o, _ in diff_out], [x for _, x, _ in diff_in], grads_o, allow_unused=True
        )
        gr = torch.autograd.grad(
            [r for _, r in diff_out], [r for _, _, r in diff_in], grads_r, allow_unused=True
        )
        for (n, _, _), a, b in zip(diff_in, gi, gr):
            if a is None and b is None:
                continue
            if a is None or b is None:
                raise AssertionError(
                    f"grad of {n}: one side is None (fn's is None: {a is None}, the reference's "
                    f"is None: {b is None})"
                )
            errors[f"grad_{n}"] = assert_close(
                a,
                b.to(a.device),
                rtol=grad_rtol if grad_rtol is not None else rtol,
                name=f"grad of {n}",
            )
    return errors
