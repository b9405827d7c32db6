"""Run a function on several CPU processes under ``torch.distributed`` (gloo) and collect results.

Training methods and optimizers are tested under DDP/FSDP2 by running the same step in two CPU
processes and comparing with one process on the union batch. Every package needs the same
harness, so it lives here: :func:`run_distributed` starts ``world_size`` processes, initialises a
gloo process group in each (a file rendezvous in a private temporary folder, so parallel test
workers never collide on a port), calls ``fn(rank, world_size, *args)``, and returns what each
rank returned, in rank order. A rank that raises fails the call with that rank's traceback.

Example (two CPU processes, a second or two):

    >>> import torch
    >>> import torch.distributed as dist
    >>> def total(rank, world_size):
    ...     t = torch.tensor([float(rank + 1)])
    ...     dist.all_reduce(t)
    ...     return t.item()
    >>> run_distributed(total, world_size=2)
    [3.0, 3.0]
"""

from __future__ import annotations

import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["run_distributed"]


def _worker(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    args: tuple,
    folder: str,
    backend: str,
    threads: int,
) -> None:
    import torch.distributed as dist

    torch.set_num_threads(threads)
    out = Path(folder) / f"rank{rank}.pt"
    try:
        dist.init_process_group(
            backend,
            init_method=f"file://{folder}/rendezvous",
            rank=rank,
            world_size=world_size,
        )
        try:
            result = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        torch.save({"ok": True, "result": result}, out)
    except BaseException:
        torch.save({"ok": False, "error": traceback.format_exc()}, out)
        raise


def run_distributed(
    fn: Callable[..., Any],
    world_size: int = 2,
    args: tuple = (),
    backend: str = "gloo",
    threads: int = 1,
    start_method: str | None = None,
) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` processes with a process group up.

    Args:
        fn: the per-rank function. With the default ``fork`` start method (Linux) it may be a
            local function or lambda; with ``spawn`` it must be importable by name.
        world_size: number of processes (>= 1).
        args: extra positional arguments for ``fn`` (tensors, numbers, configs).
        backend: the ``torch.distributed`` backend (``"gloo"`` on CPU).
        threads: intra-op threads per process (1 keeps two ranks from fighting over two cores).
        start_method: ``"fork"`` (default where available) or ``"spawn"``.

    Returns:
        The per-rank return values (saved with ``torch.save``, so tensors, dicts, lists, numbers),
        in rank order.
    """
    import torch.multiprocessing as mp

    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size: expected an int >= 1, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    if start_method is None:
        start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    if start_method == "fork":
        # DistributedDataParallel imports torch._dynamo in its constructor (seconds, more where
        # bytecode is not cached): import it once here, so forked ranks inherit it.
        import torch._dynamo
    with tempfile.TemporaryDirectory(prefix="neurips25-dist-") as folder:
        try:
            mp.start_processes(
                _worker,
                args=(fn, world_size, tuple(args), folder, backend, threads),
                nprocs=world_size,
                join=True,
                start_method=start_method,
            )
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            # The first rank to be noticed is often a bystander (its peer hung up on it): report
            # every rank's own error, the root cause among them.
            errors = []
            for rank in range(world_size):
                path = Path(folder) / f"rank{rank}.pt"
                if path.exists():
                    blob = torch.load(path, weights_only=False)
                    if not blob["ok"]:
                        errors.append(f"-- rank {rank}:\n{blob['error']}")
            detail = "\n".join(errors) if errors else str(exc)
            raise RuntimeError(f"run_distributed: a rank failed:\n{detail}") from None
        results = []
        for rank in range(world_size):
            path = Path(folder) / f"rank{rank}.pt"
            if not path.exists():
                raise RuntimeError(f"run_distributed: rank {rank} returned nothing")
            blob = torch.load(path, weights_only=False)
            if not blob["ok"]:
                raise RuntimeError(f"run_distributed: rank {rank} raised:\n{blob['error']}")
            results.append(blob["result"])
        return results
