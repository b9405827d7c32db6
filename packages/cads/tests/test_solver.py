"""The CADS solver runs end to end on a tiny problem, repeats per seed, and checks its input."""

import pytest
import torch
from cads import Budget, CADSConfig
from cads.solver import CADS
from torch import nn


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long()


def _factory():
    g = torch.Generator().manual_seed(5)
    model = nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.copy_(0.1 * torch.randn(2, 4, generator=g))
        model.bias.zero_()
    return model


@pytest.mark.parametrize("granularity", ["example", "source"])
def test_cads_runs_and_repeats_per_seed(granularity):
    cfg = CADSConfig(Budget(20, 8), outer_steps=3, granularity=granularity)
    sources = torch.arange(24) % 3

    def run(seed):
        solver = CADS(
            _factory, nn.functional.cross_entropy, _data(24, 0), _data(10, 1), cfg, sources=sources
        )
        return solver.fit(torch.Generator().manual_seed(seed))

    a, b = run(0), run(0)
    assert torch.equal(a.param, b.param)
    assert len(a.history) == 3
    assert not torch.equal(a.param, torch.full_like(a.param, 0.5)), "the policy moved"
    if granularity == "source":
        assert a.weights.shape == (3,) and a.mask is None
    else:
        assert a.mask.shape == (24,) and a.weights is None


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"config": "cfg"}, TypeError, "config"),
        (
            {"config": CADSConfig(Budget(10, 4), outer_steps=1, granularity="source")},
            ValueError,
            "sources",
        ),
        ({"val_set": (torch.ones(2, 4), torch.ones(3))}, ValueError, "val_set"),
        ({"theta_steps": 0}, ValueError, "theta_steps"),
    ],
)
def test_bad_input(kwargs, exc, name):
    args = {
        "model_factory": _factory,
        "loss_fn": nn.functional.cross_entropy,
        "train_set": _data(12, 0),
        "val_set": _data(5, 1),
        "config": CADSConfig(Budget(10, 4), outer_steps=1),
    } | kwargs
    with pytest.raises(exc, match=name):
        CADS(**args)
