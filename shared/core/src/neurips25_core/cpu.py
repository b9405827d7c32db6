"""CPU kernels compiled with numba: availability, thread count, compilation, row-tiled layouts.

For a package whose CPU fast path is a numba kernel (an optional ``cpu`` extra): importing this
module never imports numba (the core does not depend on it), every numba call imports it lazily.

- :func:`numba_available`: whether numba is installed (a package's dispatch and skips ask this);
- :func:`numba_threads`: the thread count a kernel runs on, torch's (``torch.get_num_threads()``,
  so ``bench.single_thread()`` / ``bench.num_threads(n)`` govern numba too), capped at numba's pool;
- :func:`numba_parallel`: a context manager yielding whether to run the ``prange``-parallel build,
  with numba's thread count set to :func:`numba_threads` meanwhile and restored afterwards;
- :func:`numba_num_threads`: numba's thread count set to ``n`` inside, restored afterwards;
- :func:`njit_kernel`: ``numba.njit(parallel=..., fastmath=True, cache=True, nogil=True)`` of a
  kernel built by a factory, compiled once per process for each (factory, arguments, build);
- :func:`row_tiles`: a per-row array cut into row tiles, padded to a whole tile and laid out
  ``[tiles, ..., R]`` so that each tile is one contiguous stream (the layout of lookup-table
  kernels that stream uint8 codes past a table).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

__all__ = [
    "njit_kernel",
    "numba_available",
    "numba_num_threads",
    "numba_parallel",
    "numba_threads",
    "row_tiles",
]


def numba_available() -> bool:
    """Whether numba is importable (without importing it)."""
    return importlib.util.find_spec("numba") is not None


def numba_threads() -> int:
    """The thread count numba kernels run on: ``torch.get_num_threads()``, capped at numba's pool
    (``NUMBA_NUM_THREADS``). Needs numba."""
    import numba

    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


@contextlib.contextmanager
def numba_num_threads(n: int) -> Iterator[None]:
    """Set numba's thread count to ``n`` inside the block and restore the previous count after.
    Needs numba; ``n`` must lie in ``1..NUMBA_NUM_THREADS``."""
    import numba

    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n: expected an int, got {type(n).__name__}")
    if not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(
            f"n: expected 1..{numba.config.NUMBA_NUM_THREADS} (NUMBA_NUM_THREADS), got {n}"
        )
    old = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(old)


@contextlib.contextmanager
def numba_parallel() -> Iterator[bool]:
    """Yields whether to run a kernel's parallel build: ``False`` at one thread (the serial build
    needs no parallel runtime), else ``True`` with numba's thread count set to
    :func:`numba_threads` meanwhile (restored afterwards). Needs numba."""
    want = numba_threads()
    if want == 1:
        yield False
        return
    with numba_num_threads(want):
        yield True


@functools.cache
def njit_kernel(factory: Callable[..., Callable], *args: Any, parallel: bool) -> Callable:
    """``factory(*args)`` compiled by ``numba.njit(parallel=parallel, fastmath=True, cache=True,
    nogil=True)``, once per process for each ``(factory, args, parallel)`` (numba also caches the
    machine code on disk). The factory returns the kernel's Python function; it imports numba
    itself where the kernel uses ``numba.prange``, and takes compile-time constants (tile sizes,
    token widths) as ``args``, which must be hashable. Needs numba."""
    import numba

    return numba.njit(parallel=parallel, fastmath=True, cache=True, nogil=True)(factory(*args))


def row_tiles(t: torch.Tensor, tile: int) -> np.ndarray:
    """``t`` ``[M, *rest]`` -> C-contiguous numpy ``[ceil(M/tile), *rest, tile]``: the rows cut into
    tiles of ``tile`` rows, the last padded with zeros to a whole tile, the row index moved last
    (a tile's entries for one ``rest`` index are adjacent). Keeps ``t``'s dtype; detaches and
    copies to the CPU.

    Example:
        >>> import torch
        >>> row_tiles(torch.arange(6).view(3, 2), 2).tolist()  # tiles of rows (0, 1) and (2, pad)
        [[[0, 2], [1, 3]], [[4, 0], [5, 0]]]
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"t: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() < 1:
        raise ValueError("t: expected at least one dimension (the rows), got a scalar")
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise ValueError(f"tile: expected a positive int, got {tile!r}")
    rows, rest = t.shape[0], tuple(t.shape[1:])
    tiles = -(-rows // tile)
    padded = torch.nn.functional.pad(
        t.detach().cpu(), (0, 0) * len(rest) + (0, tiles * tile - rows)
    )
    # [tiles, R, *rest] -> [tiles, *rest, R]
    order = (0, *range(2, len(rest) + 2), 1)
    return np.ascontiguousarray(padded.view(tiles, tile, *rest).permute(order).numpy())
