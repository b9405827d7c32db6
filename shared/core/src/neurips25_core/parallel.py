"""Independent runs on several CPU cores: spawned single-thread worker processes, results in order.

A reproduction made of many independent seeded runs (a learning-rate sweep, seeds, arms) is
embarrassingly parallel; on a small machine the cheapest speed-up is one single-threaded process
per core, not more intra-op threads (small models spend their time in per-op overhead).

- :func:`workers_from_env`: a worker count read from an environment variable (``PKG_WORKERS``),
  validated, with a default;
- :func:`process_map`: ``[fn(item) for item in items]``, in ``workers`` spawned processes, each
  call under ``torch.set_num_threads(1)``, with one progress bar; ``workers=1`` runs in this
  process (same thread setting), so results do not depend on the worker count.

``fn`` must be picklable (a module-level function) and so must the items and results; each worker
imports what ``fn`` needs afresh (``spawn``: no forked torch thread pools), so a worker rebuilds
its own state (a cached checkpoint, a dataset) instead of receiving it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["process_map", "workers_from_env"]

T = TypeVar("T")
R = TypeVar("R")


def workers_from_env(var: str, default: int = 1) -> int:
    """The int >= 1 in the environment variable ``var``, or ``default`` when it is unset or empty.

    Raises:
        ValueError: the variable (or ``default``) is not an int >= 1; the message names ``var``.
    """
    if not isinstance(var, str) or not var:
        raise TypeError(f"var: expected a non-empty str, got {var!r}")
    if isinstance(default, bool) or not isinstance(default, int) or default < 1:
        raise ValueError(f"default: expected an int >= 1, got {default!r}")
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{var}: expected an int >= 1, got {raw!r}")
    return n


def _one_thread_call(fn: Callable[[T], R], item: T) -> R:
    from .bench import single_thread

    with single_thread():
        return fn(item)


def process_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int = 1,
    desc: str = "",
    progress: bool = True,
    on_result: Callable[[T, R], Any] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]`` with each call on one torch thread, in ``workers`` processes.

    Args:
        fn: a picklable function of one item (``workers > 1``: a module-level function).
        items: the inputs; materialised into a list.
        workers: processes (capped at the number of items); 1 runs every call in this process.
        desc: the progress bar's label.
        progress: show a progress bar (:func:`neurips25_core.progress.progress_bar`).
        on_result: called in this process as ``on_result(item, result)`` when each call finishes
            (in completion order; a log line, a partial save).

    Returns:
        The results in the order of ``items``.

    Raises:
        ValueError: ``workers`` is not an int >= 1. An exception inside ``fn`` propagates (the
        other workers are stopped first).
    """
    from .progress import progress_bar

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an int >= 1, got {workers!r}")
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    items = list(items)
    out: list[Any] = [None] * len(items)
    workers = min(workers, max(len(items), 1))
    with progress_bar(total=len(items), desc=desc, enabled=progress) as bar:
        if workers == 1:
            for i, item in enumerate(items):
                out[i] = _one_thread_call(fn, item)
                if on_result is not None:
                    on_result(item, out[i])
                bar.update(1)
            return out
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        with ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            futures = {pool.submit(_one_thread_call, fn, item): i for i, item in enumerate(items)}
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        i = futures[future]
                        out[i] = future.result()  # re-raises the worker's exception
                        if on_result is not None:
                            on_result(items[i], out[i])
                        bar.update(1)
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
    return out
