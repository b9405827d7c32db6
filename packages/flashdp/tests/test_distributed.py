"""Two gloo CPU processes give the single-process step on the union batch."""

from __future__ import annotations

import flashdp
import pytest
import torch
from torch import nn

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close, randn


def _train(x, y, sigma, ddp=False, rank=0, world=1, steps=2):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.Tanh(), nn.Linear(7, 3))
    cfg = flashdp.FlashDPConfig(max_grad_norm=0.2, noise_multiplier=sigma)
    model = flashdp.make_private(model, cfg)
    wrapped = nn.parallel.DistributedDataParallel(model) if ddp else model
    gen = torch.Generator().manual_seed(11)  # seeded alike on every rank
    opt = flashdp.DPOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.5), wrapped, cfg, x.shape[0], generator=gen
    )
    shard = x.shape[0] // world
    xs, ys = x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]
    for _ in range(steps):
        ((wrapped(xs) - ys) ** 2).sum((1, 2)).mean().backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _rank(rank, world, x, y):
    return {
        (sigma, ddp): _train(x, y, sigma, ddp, rank, world)
        for sigma in (0.0, 1.0)
        for ddp in (False, True)
    }


@pytest.mark.slow  # ~25 s on the shared two cores (process start-up and imports)
def test_two_ranks_equal_one_process():
    x = randn(8, 3, 5, seed=1)
    y = randn(8, 3, 3, seed=2)
    ranks = run_distributed(_rank, world_size=2, args=(x, y))
    for (sigma, ddp), params in ranks[0].items():
        single = _train(x, y, sigma)
        for p, q, r in zip(params, ranks[1][(sigma, ddp)], single, strict=True):
            assert torch.equal(p, q), "the ranks stay in sync"
            assert_close(p, r, rtol=1e-6, name=f"sigma={sigma} ddp={ddp}")
