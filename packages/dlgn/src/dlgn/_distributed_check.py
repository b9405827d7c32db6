"""A two-process DDP self-check of GLGN training (used by the tests; gloo on CPU).

Every rank builds the same net (same seed: same wiring and logits), seeds the Gumbel generator
alike (so every rank samples the same circuit each step), wraps it in DDP and takes ``STEPS``
Adam steps on its shard of each batch. :func:`single_process_reference` trains the same net on the
union batches in one process. With equal shards, DDP's mean of the per-rank mean gradients is the
gradient of the union's mean loss, so the parameters must agree.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["STEPS", "run_check", "single_process_reference"]

STEPS = 5
BATCH = 12


def _net(mode: str):
    from .layers import LogicNet
    from .train import noise_generator

    torch.manual_seed(0)
    net = LogicNet.from_widths(
        16, [24, 20], num_classes=4, tau=3.0, mode=mode, generator=noise_generator(1234)
    )
    return net.double()


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randint(0, 2, (BATCH, 16), generator=g).double()
    y = torch.randint(0, 4, (BATCH,), generator=g)
    return x, y


def _steps(model: nn.Module, params, shard: slice) -> None:
    opt = torch.optim.Adam(params, lr=0.05)
    for step in range(STEPS):
        x, y = _batch(step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[shard]), y[shard]).backward()
        opt.step()


def single_process_reference(mode: str = "gumbel") -> list[torch.Tensor]:
    """The parameters after ``STEPS`` single-process steps on the union batches."""
    net = _net(mode)
    _steps(net, net.parameters(), slice(None))
    return [p.detach().clone() for p in net.parameters()]


def _worker(rank: int, world_size: int, modes: tuple) -> dict[str, list[torch.Tensor]]:
    from torch.nn.parallel import DistributedDataParallel

    out = {}
    for mode in modes:
        net = _net(mode)
        ddp = DistributedDataParallel(net)
        per = BATCH // world_size
        _steps(ddp, ddp.parameters(), slice(rank * per, (rank + 1) * per))
        out[mode] = [p.detach().clone() for p in net.parameters()]
    return out


def run_check(
    world_size: int = 2, modes: tuple = ("gumbel", "softmax")
) -> list[dict[str, list[torch.Tensor]]]:
    """Run ``world_size`` gloo processes (the core's ``run_distributed``); return every rank's
    parameters after ``STEPS`` steps, per training mode (one start-up trains every mode)."""
    from neurips25_core.distributed import run_distributed

    if BATCH % world_size:
        raise ValueError(f"world_size: expected a divisor of {BATCH}, got {world_size}")
    return run_distributed(_worker, world_size=world_size, args=(tuple(modes),))
