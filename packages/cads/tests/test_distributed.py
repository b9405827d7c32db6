"""Distributed CADS: rollouts split across two gloo ranks (rollout k on rank k % 2), values summed
across ranks, one policy step everywhere, equals one process (3 outer steps, <= 1e-6; measured
bit for bit, since the values are summed with zeros)."""

from __future__ import annotations

import pytest
import torch
from cads import Budget, CADSConfig
from cads.solver import CADS
from torch import nn

from neurips25_core.distributed import run_distributed


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] + 0.3 * x[:, 1] > 0).long()


def _factory():
    g = torch.Generator().manual_seed(5)
    model = nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.copy_(0.1 * torch.randn(2, 4, generator=g))
        model.bias.zero_()
    return model


def _fit(rank, world, granularity, value):
    cfg = CADSConfig(Budget(15, 8), outer_steps=3, granularity=granularity)
    solver = CADS(
        _factory,
        nn.functional.cross_entropy,
        _data(30, 0),
        _data(12, 1),
        cfg,
        sources=torch.arange(30) % 3,
        value=value,
    )
    sel = solver.fit(torch.Generator().manual_seed(7))
    key = "mean_value" if value == "exact" else "mean_penalty"
    return sel.param, [h[key] for h in sel.history]


@pytest.mark.parametrize(("granularity", "value"), [("example", "penalty"), ("source", "exact")])
def test_two_gloo_processes_give_the_single_process_trajectory(granularity, value):
    param, trajectory = _fit(0, 1, granularity, value)
    for rank_param, rank_trajectory in run_distributed(
        _fit, world_size=2, args=(granularity, value)
    ):
        torch.testing.assert_close(rank_param, param, rtol=0, atol=1e-6)
        assert rank_trajectory == pytest.approx(trajectory, abs=1e-6)
    assert not torch.equal(param, torch.full_like(param, 0.5)), "the policy moved"
