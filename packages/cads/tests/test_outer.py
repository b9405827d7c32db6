"""The outer loop (BudgetedPBCS with exact values) on the reference; budget dependence of s*."""

import pytest
import torch
from cads import BernoulliPolicy, TruncatedGaussianPolicy
from cads.outer import BudgetedPBCS, PolicyOptimizer
from cads.reference import LeastSquaresProblem, all_masks


def _fast_clean_slow_rest():
    """4 fast examples along e1 (large curvature) and 4 slow ones along e2 (small curvature)."""
    g = torch.Generator().manual_seed(0)
    fast = torch.tensor([[3.0, 0.0]]).repeat(4, 1) + 0.1 * torch.randn(4, 2, generator=g)
    slow = torch.tensor([[0.0, 0.4]]).repeat(4, 1) + 0.05 * torch.randn(4, 2, generator=g)
    x = torch.cat([fast, slow]).double()
    theta = torch.tensor([1.0, 1.0], dtype=torch.float64)
    x_val = torch.eye(2, dtype=torch.float64)
    return LeastSquaresProblem(
        x, x @ theta, x_val, x_val @ theta, torch.zeros(2, dtype=torch.float64), eta=0.1
    )


def test_optimal_selection_depends_on_the_budget():
    # Phi is multilinear in s, so its minimum over the box is the best single mask.
    prob, masks = _fast_clean_slow_rest(), all_masks(8)
    best = {b: masks[prob.values(masks, b).argmin()] for b in (2, 500)}
    assert not torch.equal(best[2], best[500])
    assert best[2][4:].sum() == 0, "a tiny budget keeps only fast examples"
    assert best[500][4:].all(), "a large budget keeps every slow example"


def _pbcs(prob, steps, seed):
    table = prob.values(all_masks(8), steps)
    weights = 2 ** torch.arange(7, -1, -1)
    policy = BernoulliPolicy(8)
    solver = BudgetedPBCS(
        lambda m: table[(m.long() * weights).sum(1)], policy, outer_steps=120, rollouts=5
    )
    solver.fit(torch.Generator().manual_seed(seed))
    return policy, solver, table


def test_budgeted_pbcs_with_exact_values_follows_the_budget():
    prob = _fast_clean_slow_rest()
    small, solver, _ = _pbcs(prob, 2, seed=1)
    large, _, _ = _pbcs(prob, 500, seed=1)
    assert len(solver.history) == 120
    # Slow examples lose probability at B = 2 and gain it at B = 500.
    assert small.s[4:].mean() < 0.5 < large.s[4:].mean()
    for policy, steps in ((small, 2), (large, 500)):
        start, _ = prob.exact(torch.full((8,), 0.5, dtype=torch.float64), steps)
        end, _ = prob.exact(policy.s, steps)
        assert end < start


def test_budgeted_pbcs_is_seeded():
    prob = _fast_clean_slow_rest()
    a, _, _ = _pbcs(prob, 5, seed=3)
    b, _, _ = _pbcs(prob, 5, seed=3)
    assert torch.equal(a.s, b.s)


def test_policy_optimizer_projects_and_reports_the_unclipped_norm():
    policy = BernoulliPolicy(3, subset_size=1)
    opt = PolicyOptimizer(policy, lr=0.5, clip_norm=1.0, total_steps=10)
    norm = opt.step(torch.tensor([-30.0, 40.0, 0.0], dtype=torch.float64))
    assert norm == pytest.approx(50.0)
    assert policy.s.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert policy.s[0] > policy.s[2] > policy.s[1]
    tn = TruncatedGaussianPolicy(2, init=0.99)
    PolicyOptimizer(tn, lr=0.5, total_steps=5).step(torch.tensor([-1.0, 1.0], dtype=torch.float64))
    assert tn.mu.tolist()[0] == 1.0 and tn.mu[1] < 0.99


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"rollouts": 1}, ValueError, "rollouts"),
        ({"outer_steps": 0}, ValueError, "outer_steps"),
        ({"value_fn": 3}, TypeError, "value_fn"),
        ({"policy": "s"}, TypeError, "policy"),
    ],
)
def test_bad_solver_input(kwargs, exc, name):
    args = {
        "value_fn": lambda m: m.double().sum(1),
        "policy": BernoulliPolicy(4),
        "outer_steps": 2,
    } | kwargs
    with pytest.raises(exc, match=name):
        BudgetedPBCS(**args)


def test_value_fn_of_the_wrong_shape_is_refused():
    solver = BudgetedPBCS(lambda m: torch.zeros(2), BernoulliPolicy(4), outer_steps=1, rollouts=3)
    with pytest.raises(ValueError, match="value_fn"):
        solver.fit(torch.Generator().manual_seed(0))
