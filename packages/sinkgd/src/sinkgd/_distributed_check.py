"""A two-process self-check of SinkGD on sharded parameters (used by the tests; gloo on CPU).

``run_check(world_size, out_path)`` spawns ``world_size`` processes that each build the same small
model, shard it with FSDP2 (``fully_shard``, ``Shard(0)``, uneven shards), take two
:class:`sinkgd.SinkGDWithAdam` steps, and also step single matrices placed by hand as ``Shard(0)``
and ``Shard(1)`` DTensors. Rank 0 saves the gathered (full) parameters to ``out_path``;
``single_process_reference()`` computes the same quantities without sharding.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["run_check", "single_process_reference"]

MATRIX_SHAPE = (9, 13)  # odd both ways: uneven shards along either dimension


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 7),
        nn.LayerNorm(7),
        nn.Tanh(),
        nn.Linear(7, 5, bias=False),
        nn.Linear(5, 9, bias=False),
    )


def _batch(step: int) -> torch.Tensor:
    return torch.randn(4, 6, generator=torch.Generator().manual_seed(100 + step))


def _matrix_and_grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    w = torch.randn(*MATRIX_SHAPE, generator=g)
    return w, [torch.randn(*MATRIX_SHAPE, generator=g) for _ in range(2)]


def _optimizer(model: nn.Module):
    import sinkgd

    return sinkgd.SinkGDWithAdam(
        sinkgd.param_groups(model), lr=0.02, sinkgd_scale=0.5, weight_decay=0.01
    )


def single_process_reference() -> dict[str, list[torch.Tensor]]:
    """The unsharded results the sharded run must reproduce."""
    import sinkgd

    model = _model()
    opt = _optimizer(model)
    for step in range(2):
        opt.zero_grad()
        model(_batch(step)).pow(2).mean().backward()
        opt.step()
    out = {"fsdp": [p.detach().clone() for p in model.parameters()]}
    for name in ("shard0", "shard1"):
        w, grads = _matrix_and_grads()
        p = nn.Parameter(w.clone())
        opt = sinkgd.SinkGD([p], lr=0.1, weight_decay=0.1)
        for g in grads:
            p.grad = g.clone()
            opt.step()
        out[name] = [p.detach().clone()]
    return out


def _worker(rank: int, world_size: int, init_file: str, out_path: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor

    import sinkgd

    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        mesh = init_device_mesh("cpu", (world_size,))
        model = _model()
        for layer in model:
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = _optimizer(model)
        for step in range(2):
            opt.zero_grad()
            model(_batch(step)).pow(2).mean().backward()
            opt.step()
        out = {"fsdp": [p.full_tensor().detach().clone() for p in model.parameters()]}
        for name, dim in (("shard0", 0), ("shard1", 1)):
            w, grads = _matrix_and_grads()
            p = nn.Parameter(distribute_tensor(w, mesh, [Shard(dim)]))
            opt = sinkgd.SinkGD([p], lr=0.1, weight_decay=0.1)
            for g in grads:
                p.grad = distribute_tensor(g, mesh, [Shard(dim)])
                opt.step()
            out[name] = [p.full_tensor().detach().clone()]
        if rank == 0:
            torch.save(out, out_path)
        dist.barrier()  # nobody tears down gloo while a peer still talks to it
    finally:
        dist.destroy_process_group()


def run_check(
    world_size: int, out_path: str, init_file: str, start_method: str = "spawn"
) -> dict[str, list[torch.Tensor]]:
    """Start ``world_size`` gloo processes and return rank 0's gathered parameters.

    ``spawn`` (the default) is safe after the parent has used OpenMP or CUDA; ``fork`` starts faster
    but can deadlock in a process whose OpenMP thread pool is already running.
    """
    import torch.multiprocessing as mp

    mp.start_processes(
        _worker,
        args=(world_size, init_file, out_path),
        nprocs=world_size,
        join=True,
        start_method=start_method,
    )
    return torch.load(out_path)
