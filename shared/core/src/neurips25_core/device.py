"""Which device to run on, and whether CUDA, Triton and the Triton interpreter are usable.

None of these functions initialises CUDA unless CUDA is actually present: ``torch.cuda.is_available()``
only queries the driver, and Triton is imported lazily.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

__all__ = [
    "best_device",
    "cuda_available",
    "kernel_buffer",
    "triton_available",
    "triton_interpret",
    "triton_usable",
    "use_triton_for",
]


def cuda_available() -> bool:
    """True when a CUDA device can be used by torch."""
    return torch.cuda.is_available()


@functools.cache
def triton_available() -> bool:
    """True when the ``triton`` package is installed (it is absent on macOS and Windows)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpret() -> bool:
    """True when ``TRITON_INTERPRET=1``: Triton kernels then run on CPU tensors (slowly)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_usable() -> bool:
    """True when Triton kernels can run here: Triton installed and a GPU or the interpreter."""
    return triton_available() and (cuda_available() or triton_interpret())


def use_triton_for(tensor: torch.Tensor) -> bool:
    """Whether ``backend="auto"`` should pick the Triton kernel for ``tensor``.

    On CUDA tensors the Triton kernel runs; on CPU tensors the torch implementation runs. The
    interpreter does not change the ``auto`` choice (tests ask for ``backend="triton"`` explicitly).
    """
    return tensor.is_cuda and triton_available()


def best_device() -> torch.device:
    """The fastest device available: ``cuda`` when present, else ``cpu``."""
    return torch.device("cuda" if cuda_available() else "cpu")


def kernel_buffer(
    *shape: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """An output buffer a Triton kernel fills: NaN-poisoned under the interpreter, empty otherwise.

    Under ``TRITON_INTERPRET=1`` (the CPU tests) every entry the kernel fails to write stays NaN
    (integers: the dtype's minimum), so a missed tile shows up in the comparison against the
    reference; on a GPU the buffer is ``torch.empty`` and costs nothing.
    """
    if triton_interpret():
        from neurips25_core.testing import poisoned_empty

        return poisoned_empty(*shape, dtype=dtype, device=device)
    return torch.empty(*shape, dtype=dtype, device=device)
