"""Data-parallel ZO: two gloo ranks on shards equal one process on the union batch.

Float64: in fp32 the mean of two half-batch losses differs from the union-batch loss by ~1e-7,
which the 1/(2 eps) of SPSA amplifies to ~3e-6 weight differences after 20 steps (measured).
"""

from __future__ import annotations

import torch
from dizo import DiZO, DiZOConfig

from neurips25_core.distributed import run_distributed


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1)
    ).double()


def _batches():
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(4):
        x = torch.randn(16, 6, generator=g, dtype=torch.float64)
        out.append((x, x.sum(1, keepdim=True).sin()))
    return out


def _loss(m, b):
    return ((m(b[0]) - b[1]) ** 2).mean()


def _train(rank, world):
    model = _model()
    data = _batches()
    shard = [(x[rank::world], y[rank::world]) for x, y in data]
    cfg = DiZOConfig(lr=2e-2, interval=7, proj_iters=3, include=r"^0\.weight$", seed=3)
    opt = DiZO(model, cfg, shard)
    for i in range(20):
        opt.step(_loss, shard[i % 4])
    return [p.detach().clone() for p in model.parameters()]


def test_two_ranks_equal_union_batch():
    single = _train(0, 1)
    ranks = run_distributed(_train, world_size=2)
    for a, b in zip(ranks[0], ranks[1]):
        assert torch.equal(a, b)
    for a, b in zip(ranks[0], single):
        assert (a - b).abs().max() <= 1e-6
