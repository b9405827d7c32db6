"""Policy, scores and the hierarchical REINFORCE estimator against exact enumeration (float64)."""

from __future__ import annotations

import pytest
import torch
from qcs import HierarchicalBernoulliPolicy, hierarchical_policy_gradient, token_weights
from qcs.reference import (
    enumerate_masks,
    exact_estimator_mean,
    exact_gradient,
    expected_objective_exact,
    implicit_hypergradient,
    make_ridge_problem,
    objective,
)

LENGTHS = [2, 3, 2, 3]  # n = 4, T_i ∈ {2, 3}: Π(1 + 2^T_i) = 2025 masks


def _interior_policy(seed=0, budget=2, ratio=0.5):
    pol = HierarchicalBernoulliPolicy(LENGTHS, budget, ratio, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    pol.s = pol.s + 0.3 * (torch.rand(4, generator=g, dtype=torch.float64) - 0.5)
    pol.t = (
        pol.t + 0.3 * (torch.rand(pol.t.shape, generator=g, dtype=torch.float64) - 0.5)
    ) * pol.token_mask
    pol.project_()
    assert bool(((pol.s > 0.05) & (pol.s < 0.95)).all())
    return pol


def test_init_and_budgets():
    pol = HierarchicalBernoulliPolicy([3, 1, 4], budget=2, token_ratio=0.5, dtype=torch.float64)
    assert torch.allclose(pol.s, torch.full((3,), 2 / 3, dtype=torch.float64))
    assert pol.token_mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert torch.allclose(pol.t.sum(-1), torch.tensor([1.5, 0.5, 2.0], dtype=torch.float64))
    assert float(pol.t[~pol.token_mask].abs().sum()) == 0.0


def test_sample_is_seeded_hierarchical_and_masked():
    pol = _interior_policy()
    w1, v1 = pol.sample(64, torch.Generator().manual_seed(3))
    w2, v2 = pol.sample(64, torch.Generator().manual_seed(3))
    w3, _ = pol.sample(64, torch.Generator().manual_seed(4))
    assert torch.equal(w1, w2) and torch.equal(v1, v2)
    assert not torch.equal(w1, w3)
    assert w1.shape == (64, 4) and v1.shape == (64, 4, 3)
    assert not bool((v1 & ~w1[..., None]).any()), "tokens sampled in an unselected sequence"
    assert not bool((v1 & ~pol.token_mask).any()), "tokens sampled on padding"


def test_scores_equal_autograd_of_log_prob():
    pol = _interior_policy(seed=1)
    w, v = pol.sample(7, torch.Generator().manual_seed(0))
    ds, dt = pol.score(w, v)
    for k in range(7):
        s = pol.s.clone().requires_grad_(True)
        t = pol.t.clone().requires_grad_(True)
        lp = pol.log_prob(w[k : k + 1], v[k : k + 1], s, t)[0]
        gs, gt = torch.autograd.grad(lp, (s, t))
        torch.testing.assert_close(ds[k], gs, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(dt[k], gt, rtol=1e-12, atol=1e-12)
    unselected = ~w[..., None].expand_as(dt)
    assert bool((dt[unselected] == 0).all()), "dt must be exactly 0 for unselected sequences"
    assert bool((dt[:, ~pol.token_mask] == 0).all())


def test_enumeration_probabilities_sum_to_one():
    pol = _interior_policy(seed=2)
    w, v = enumerate_masks(pol.token_mask)
    assert w.shape[0] == 5 * 9 * 5 * 9
    lp = pol.log_prob(w, v)
    torch.testing.assert_close(lp.exp().sum(), torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_estimator_expectation_is_exact_gradient(eps):
    """E[F·score] over all masks equals ∇Φ exactly (the unbiasedness identity, no sampling)."""
    prob = make_ridge_problem(LENGTHS, seed=5)
    pol = _interior_policy(seed=3)
    gs, gt = exact_gradient(prob, pol.s, pol.t, eps)
    es, et = exact_estimator_mean(prob, pol.s, pol.t, eps)
    torch.testing.assert_close(es, gs, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(et, gt, rtol=1e-10, atol=1e-12)
    assert float(gs.abs().max()) > 1e-4 and float(gt.abs().max()) > 1e-4, "vacuous problem"


def _mc_check(prob, pol, K, baseline, eps, seed, n_batches=20):
    """K draws split into batches of K/n_batches rollouts; the per-batch estimates are i.i.d."""
    per = K // n_batches
    gen = torch.Generator().manual_seed(seed)
    ests_s, ests_t = [], []
    for _ in range(n_batches):
        w, v = pol.sample(per, gen)
        Fv = objective(prob, token_weights(w, v, eps, pol.token_mask).double())
        gs, gt = hierarchical_policy_gradient(Fv, w, v, pol.s, pol.t, pol.token_mask, baseline)
        ests_s.append(gs)
        ests_t.append(gt)
    es, et = torch.stack(ests_s), torch.stack(ests_t)
    return es.mean(0), es.std(0) / n_batches**0.5, et.mean(0), et.std(0) / n_batches**0.5


@pytest.mark.parametrize("baseline", ["none", "loo"])
def test_monte_carlo_within_four_standard_errors(baseline):
    eps = 0.1
    prob = make_ridge_problem(LENGTHS, seed=5)
    pol = _interior_policy(seed=3)
    gs, gt = exact_gradient(prob, pol.s, pol.t, eps)
    ms, se_s, mt, se_t = _mc_check(prob, pol, 20_000, baseline, eps, seed=11)
    assert bool(((ms - gs).abs() <= 4 * se_s).all()), (ms, gs, se_s)
    m = pol.token_mask
    assert bool(((mt - gt)[m].abs() <= 4 * se_t[m]).all()), (mt, gt, se_t)


def test_loo_baseline_reduces_variance_without_changing_the_mean():
    prob = make_ridge_problem(LENGTHS, seed=5)
    pol = _interior_policy(seed=3)
    _, se_none, _, _ = _mc_check(prob, pol, 20_000, "none", 0.1, seed=12)
    _, se_loo, _, _ = _mc_check(prob, pol, 20_000, "loo", 0.1, seed=12)
    assert float(se_loo.norm()) < float(se_none.norm())


def test_vertices_give_the_deterministic_objective():
    prob = make_ridge_problem(LENGTHS, seed=6)
    pol = HierarchicalBernoulliPolicy(LENGTHS, 2, 0.5, dtype=torch.float64)
    s = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    t = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=torch.float64)
    phi = expected_objective_exact(prob, s, t, 0.1)
    w, v = s.bool()[None], (t.bool() & pol.token_mask & s.bool()[:, None])[None]
    direct = objective(prob, token_weights(w, v, 0.1, pol.token_mask).double())[0]
    torch.testing.assert_close(phi, direct, rtol=1e-13, atol=0.0)


def test_elastic_half_zeroes_the_token_gradient_in_expectation():
    prob = make_ridge_problem(LENGTHS, seed=5)
    pol = _interior_policy(seed=3)
    _, gt = exact_gradient(prob, pol.s, pol.t, 0.5)
    _, et = exact_estimator_mean(prob, pol.s, pol.t, 0.5)
    assert float(gt.abs().max()) < 1e-13
    assert float(et.abs().max()) < 1e-13


def test_implicit_hypergradient_matches_central_differences():
    prob = make_ridge_problem(LENGTHS, seed=7)
    g = torch.Generator().manual_seed(1)
    c = (0.1 + torch.rand(4, 3, generator=g, dtype=torch.float64)) * prob.token_mask
    hyper = implicit_hypergradient(prob, c)
    h = 1e-5
    fd = torch.zeros_like(c)
    for i, j in prob.token_mask.nonzero().tolist():
        e = torch.zeros_like(c)
        e[i, j] = h
        fd[i, j] = (objective(prob, c + e) - objective(prob, c - e)) / (2 * h)
    torch.testing.assert_close(hyper, fd, rtol=0, atol=1e-7)
    autograd_c = c.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(objective(prob, autograd_c), autograd_c)
    torch.testing.assert_close(hyper, ga * prob.token_mask, rtol=1e-10, atol=1e-12)


def test_sequence_only_ratio_forces_all_tokens():
    pol = HierarchicalBernoulliPolicy(LENGTHS, 2, 1.0, dtype=torch.float64)
    w, v = pol.sample(50, torch.Generator().manual_seed(0))
    assert torch.equal(v, w[..., None] & pol.token_mask)
    _, _dt = pol.score(w, v)
    Fv = torch.randn(50, dtype=torch.float64)
    _, gt = hierarchical_policy_gradient(Fv, w, v, pol.s, pol.t, pol.token_mask, "loo")
    # t is clamped to 1 − 1e-6: the score is 1e6-scale positive but t stays at 1 after projection.
    pol.t = pol.t - 0.05 * gt
    pol.project_()
    assert torch.equal(pol.t, pol.token_mask.double())


def test_project_keeps_budgets_after_a_gradient_step():
    prob = make_ridge_problem(LENGTHS, seed=5)
    pol = _interior_policy(seed=3)
    w, v = pol.sample(8, torch.Generator().manual_seed(0))
    Fv = objective(prob, token_weights(w, v, 0.1, pol.token_mask).double())
    gs, gt = hierarchical_policy_gradient(Fv, w, v, pol.s, pol.t, pol.token_mask)
    pol.s = pol.s - 0.5 * gs
    pol.t = pol.t - 0.5 * gt
    pol.project_()
    assert abs(float(pol.s.sum()) - 2) < 1e-9
    torch.testing.assert_close(pol.t.sum(-1), pol.token_budgets, rtol=0, atol=1e-9)
    assert float(pol.s.min()) >= 0 and float(pol.s.max()) <= 1
    assert float(pol.t.min()) >= 0 and float(pol.t.max()) <= 1


def test_select_topk_budgets_exact():
    pol = HierarchicalBernoulliPolicy([3, 2, 4, 1, 5], 2, 0.5, dtype=torch.float64)
    pol.s = torch.tensor([0.1, 0.9, 0.3, 0.8, 0.2], dtype=torch.float64)
    pol.t = (
        torch.rand(pol.t.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        * pol.token_mask
    )
    sel = pol.select_topk()
    assert sel.sequence_idx.tolist() == [1, 3]
    assert sel.token_mask.sum(-1).tolist() == [0, 1, 0, 1, 0]  # ⌈0.5·2⌉ = 1, ⌈0.5·1⌉ = 1
    j = int(sel.token_mask[1].nonzero()[0, 0])
    assert j == int(pol.t[1, :2].argmax())
