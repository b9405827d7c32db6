"""The model-training value function of BudgetedPBCS (inner="budget"|"converge") and the tau = 1
reduction: CADS with exact values and a full-length probe is BudgetedPBCS on the same masks and seeds."""

import pytest
import torch
from cads import Budget, CADSConfig
from cads.outer import BudgetedPBCS, TrainingValue
from cads.policies import BernoulliPolicy, TruncatedGaussianPolicy
from cads.solver import CADS
from cads.train import budgeted_train, default_optimizer, train_to_convergence
from torch import nn

CE = nn.functional.cross_entropy


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] + 0.3 * x[:, 1] > 0).long()


def _factory():
    g = torch.Generator().manual_seed(5)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_recording_a_curve_does_not_change_the_training():
    train, sel = _data(30, 0), torch.arange(30) % 3 == 0
    runs = [
        budgeted_train(
            _factory,
            train,
            sel,
            Budget(12, 4),
            default_optimizer,
            torch.Generator().manual_seed(7),
            checkpoints=ticks,
        )
        for ticks in (None, [1, 3, 6, 12])
    ]
    assert torch.equal(_params(runs[0][0]), _params(runs[1][0]))
    assert runs[1][1] is not None and len(runs[1][1][0]) == 4


@pytest.mark.parametrize("granularity", ["example", "source"])
def test_tau_one_with_exact_values_is_budgeted_pbcs(granularity):
    train, val = _data(24, 0), _data(10, 1)
    sources = torch.arange(24) % 3
    budget = Budget(10, 4)
    cfg = CADSConfig(budget, outer_steps=3, rollouts=4, probe_fraction=1.0, granularity=granularity)
    cads = CADS(_factory, CE, train, val, cfg, sources=sources, value="exact")
    got = cads.fit(torch.Generator().manual_seed(3))

    policy = BernoulliPolicy(24) if granularity == "example" else TruncatedGaussianPolicy(3)
    value_fn = TrainingValue(_factory, CE, train, val, budget, sources=sources)
    pbcs = BudgetedPBCS(value_fn, policy, outer_steps=3, rollouts=4, lr=cfg.outer_lr)
    pbcs.fit(torch.Generator().manual_seed(3))

    assert value_fn.steps_taken == [10] * 12
    for ours, theirs in zip(got.history, pbcs.history, strict=True):
        assert ours["values"] == theirs["values"]  # the same F(A_B(m_k)), bit for bit
    assert torch.equal(got.param, policy.s if granularity == "example" else policy.mu)
    assert not torch.equal(got.param, torch.full_like(got.param, 0.5)), "the policy moved"

    # A shorter probe (tau = 0.5) is no longer the conventional solver's value.
    half = CADSConfig(
        budget, outer_steps=3, rollouts=4, probe_fraction=0.5, granularity=granularity
    )
    short = CADS(_factory, CE, train, val, half, sources=sources, value="exact")
    other = short.fit(torch.Generator().manual_seed(3))
    assert other.history[0]["values"] != got.history[0]["values"]


def test_converge_first_steps_are_the_budgeted_run_and_it_stops():
    train, sel = _data(40, 0), torch.ones(40, dtype=torch.bool)
    budgeted, _ = budgeted_train(
        _factory, train, sel, Budget(15, 8), default_optimizer, torch.Generator().manual_seed(2)
    )
    capped, steps = train_to_convergence(
        _factory,
        train,
        sel,
        8,
        default_optimizer,
        torch.Generator().manual_seed(2),
        check_every=15,
        tol=0.0,
        max_steps=15,
    )
    assert steps == 15 and torch.equal(_params(budgeted), _params(capped))
    # A loose tolerance stops at the first check where the probe loss barely moves.
    _, steps = train_to_convergence(
        _factory,
        train,
        sel,
        8,
        default_optimizer,
        torch.Generator().manual_seed(2),
        check_every=20,
        tol=0.05,
        max_steps=2000,
    )
    assert 20 <= steps < 2000 and steps % 20 == 0


def test_budgeted_pbcs_with_converge_inner_runs_and_repeats():
    train, val = _data(24, 0), _data(10, 1)

    def run():
        value_fn = TrainingValue(
            _factory,
            CE,
            train,
            val,
            Budget(10, 4),
            inner="converge",
            check_every=10,
            max_steps=60,
        )
        policy = BernoulliPolicy(24)
        BudgetedPBCS(value_fn, policy, outer_steps=2, rollouts=3).fit(
            torch.Generator().manual_seed(0)
        )
        return policy.s, value_fn.steps_taken

    (a, steps), (b, _) = run(), run()
    assert torch.equal(a, b) and len(steps) == 6
    assert all(10 <= s <= 60 for s in steps)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"inner": "epochs"}, "inner"),
        ({"tol": -1.0}, "tol"),
        ({"max_steps": 0}, "max_steps"),
        ({"budget": 10}, "budget"),
        ({"val_set": (torch.ones(2, 4), torch.ones(3))}, "val_set"),
    ],
)
def test_training_value_bad_input(kwargs, name):
    args = {
        "model_factory": _factory,
        "loss_fn": CE,
        "train_set": _data(12, 0),
        "val_set": _data(5, 1),
        "budget": Budget(5, 4),
    } | kwargs
    with pytest.raises((ValueError, TypeError), match=name):
        TrainingValue(**args)


def test_cads_value_mode_is_checked():
    with pytest.raises(ValueError, match="value"):
        CADS(_factory, CE, _data(12, 0), _data(5, 1), CADSConfig(Budget(5, 4), 1), value="loss")
