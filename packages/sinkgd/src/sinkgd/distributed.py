"""SR-Sinkhorn on sharded gradients (FSDP2 / DTensor).

FSDP2 (``torch.distributed.fsdp.fully_shard``) stores every parameter and its gradient as a
``DTensor`` sharded along dim 0 (``Shard(0)``, uneven shards allowed); tensor parallelism may shard
dim 1. SR-Sinkhorn needs full row and column norms, so:

* the row sums of squares (a sum over columns) are all-reduced over every mesh dimension that
  shards dim 1 (columns),
* the column sums of squares (a sum over rows) are all-reduced over every mesh dimension that
  shards dim 0 (rows),
* the targets √N and √M use the *global* shape.

Each iteration then costs one all-reduce of a vector (length n for ``Shard(0)``), and the local
update is exactly the unsharded update restricted to the shard (to fp32 rounding of the sums).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .sinkhorn import sr_sinkhorn_torch

__all__ = ["is_dtensor", "sr_sinkhorn_dtensor"]


def is_dtensor(tensor: torch.Tensor) -> bool:
    """True when ``tensor`` is a ``torch.distributed.tensor.DTensor`` (without importing it eagerly)."""
    if type(tensor).__name__ != "DTensor":
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def _all_reduce_over(groups: list) -> Callable[[torch.Tensor], torch.Tensor] | None:
    if not groups:
        return None
    import torch.distributed as dist

    def reduce(t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous()
        for group in groups:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        return t

    return reduce


def sr_sinkhorn_dtensor(
    grad: torch.Tensor, num_iters: int, eps: float, out_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """SR-Sinkhorn of a sharded ``(M, N)`` DTensor gradient; returns the *local* ``(m, n)`` result.

    Args:
        grad: a 2-D ``DTensor`` with ``Shard(0)``, ``Shard(1)`` or ``Replicate()`` placements on any
            mesh (``Partial`` is rejected: reduce the gradient first).
        num_iters: L ≥ 1.
        eps: lower clamp of the norms.
        out_dtype: dtype of the returned local tensor.

    Returns:
        The local shard of ``SR-Sinkhorn(full gradient)``, shape of ``grad.to_local()``.
    """
    mesh = grad.device_mesh
    row_sum_groups, col_sum_groups = [], []
    for mesh_dim, placement in enumerate(grad.placements):
        if placement.is_shard():
            dim = placement.dim % grad.ndim
            # sharding dim 1 splits every row: row sums need the other shards, and vice versa
            (row_sum_groups if dim == 1 else col_sum_groups).append(mesh.get_group(mesh_dim))
        elif placement.is_partial():
            raise ValueError(
                f"grad: expected Shard or Replicate placements, got {grad.placements} "
                "(reduce the partial gradient before the optimizer step)"
            )
    local = grad.to_local()
    return sr_sinkhorn_torch(
        local,
        num_iters,
        eps,
        out_dtype=out_dtype,
        global_shape=(grad.shape[0], grad.shape[1]),
        reduce_row_sums=_all_reduce_over(row_sum_groups),
        reduce_col_sums=_all_reduce_over(col_sum_groups),
    )
