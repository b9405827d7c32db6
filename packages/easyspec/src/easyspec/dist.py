"""Layer-parallel drafting across processes: the multi-device layout of the paper, on CPU.

:func:`run_layer_parallel` starts one gloo process per group slot (one intra-op thread each)
and calls ``fn(rank, world_size, *args)`` in each with the process group up; inside, build the
draft with ``FuzzyDraft(model, group_size=world_size, backend="gloo")``. Every rank runs the
sequential layers, the base model and the verification redundantly (same inputs, same seed, so
the same tokens); in a fuzzy group rank j runs the j-th attention and one ``all_gather`` shares
the outputs and the new K/V. The process harness is ``neurips25_core.distributed.run_distributed``
(file rendezvous in a private folder: no port to race for); ``start_method="spawn"`` needs ``fn``
importable by name, the default ``fork`` takes local functions too.

On one CPU socket this measures communication, not a speed-up: the processes share the cores the
sequential draft would use. Its purpose is the exactness check (gloo equals sequential).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["run_layer_parallel"]


def run_layer_parallel(
    world_size: int, fn: Callable[..., Any], args: tuple = (), start_method: str | None = None
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo processes; per-rank results.

    >>> import torch
    >>> from easyspec.draft import FuzzyDraft
    >>> from neurips25_core.models import tiny_llama, tiny_llama_config
    >>> def draft_logits(rank, world_size):
    ...     model = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=4, num_heads=2))
    ...     d = FuzzyDraft(model, group_size=world_size, backend="gloo")
    ...     _ = d.prefill(torch.tensor([1, 2, 3]))
    ...     return d.step(4)
    >>> a, b = run_layer_parallel(2, draft_logits)
    >>> bool(torch.equal(a, b))
    True
    """
    from neurips25_core.distributed import run_distributed

    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size: expected an int >= 1, got {world_size!r}")
    return run_distributed(
        fn, world_size=world_size, args=args, backend="gloo", threads=1, start_method=start_method
    )
