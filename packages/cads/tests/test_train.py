"""budgeted_train: exactly B steps for any selection, seeded, a probe curve for budget_min."""

import pytest
import torch
from cads import Budget, budget_min
from cads.train import budgeted_train
from torch import nn


def _data(n=40, d=5, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(c, (n,), generator=g)


def _factory():
    g = torch.Generator().manual_seed(123)
    model = nn.Linear(5, 3)
    with torch.no_grad():
        model.weight.copy_(0.1 * torch.randn(3, 5, generator=g))
        model.bias.zero_()
    return model


class _Counting(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        type(self).steps += 1
        return super().step(closure)


@pytest.mark.parametrize(
    "selection",
    [torch.tensor([7]), torch.arange(40) < 3, torch.arange(40), torch.tensor([0.0, 1.0])],
    ids=["one-index", "mask-3", "all", "source-weights"],
)
def test_exactly_budget_steps_for_any_selection(selection):
    _Counting.steps = 0
    sources = torch.arange(40) % 2
    budgeted_train(
        _factory,
        _data(),
        selection,
        Budget(17, 8),
        lambda p: _Counting(p, lr=0.1),
        torch.Generator().manual_seed(0),
        sources=sources,
    )
    assert _Counting.steps == 17


def test_same_seed_same_model_and_outer_no_grad_still_trains():
    def run(seed):
        with torch.no_grad():
            model, _ = budgeted_train(
                _factory,
                _data(),
                torch.arange(40) < 20,
                Budget(10, 4),
                lambda p: torch.optim.SGD(p, lr=0.5),
                torch.Generator().manual_seed(seed),
            )
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a, torch.cat([p.detach().flatten() for p in _factory().parameters()]))


def test_source_weights_draw_only_from_weighted_sources():
    x, y = _data()
    sources = (torch.arange(40) >= 20).long()
    x = x.clone()
    x[20:] = float("nan")  # any batch from source 1 would poison the weights
    model, _ = budgeted_train(
        _factory,
        (x, y),
        torch.tensor([1.0, 0.0]),
        Budget(12, 8),
        lambda p: torch.optim.SGD(p, lr=0.1),
        torch.Generator().manual_seed(0),
        sources=sources,
    )
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_curve_records_the_probe_loss_and_feeds_budget_min():
    _, (t, loss) = budgeted_train(
        _factory,
        _data(),
        torch.arange(40),
        Budget(64, 8),
        lambda p: torch.optim.SGD(p, lr=0.2),
        torch.Generator().manual_seed(0),
        checkpoints=[0, 2, 4, 8, 16, 32, 64],
    )
    assert t.tolist() == [0, 2, 4, 8, 16, 32, 64]
    assert loss[-1] < loss[0]
    v = budget_min((t, loss), Budget(320, 8))
    assert v <= loss.min().item()


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"selection": torch.zeros(40, dtype=torch.bool)}, ValueError, "selection"),
        ({"selection": torch.tensor([], dtype=torch.long)}, ValueError, "selection"),
        ({"selection": torch.tensor([40])}, ValueError, "selection"),
        (
            {"selection": torch.tensor([0.0, 0.0]), "sources": torch.arange(40) % 2},
            ValueError,
            "selection",
        ),
        ({"selection": torch.tensor([1.0, 0.0])}, ValueError, "sources"),
        ({"selection": [0, 1]}, TypeError, "selection"),
        ({"budget": 10}, TypeError, "budget"),
        ({"checkpoints": [0, 11]}, ValueError, "checkpoints"),
        ({"generator": 0}, TypeError, "generator"),
        ({"dataset": (torch.ones(3, 5), torch.ones(4))}, ValueError, "dataset"),
    ],
)
def test_bad_input(kwargs, exc, name):
    args = {
        "model_factory": _factory,
        "dataset": _data(),
        "selection": torch.arange(40),
        "budget": Budget(10, 4),
        "optimizer_factory": lambda p: torch.optim.SGD(p, lr=0.1),
        "generator": torch.Generator().manual_seed(0),
    } | kwargs
    with pytest.raises(exc, match=name):
        budgeted_train(**args)
