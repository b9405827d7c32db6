"""Policies and the policy-gradient estimator against autograd, quadrature, KS and enumeration."""

import math

import pytest
import torch
from cads import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient
from cads.reference import LeastSquaresProblem, all_masks
from scipy import integrate, stats

from neurips25_core.testing import assert_close


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_bernoulli_score_is_autograd_of_log_prob():
    p = BernoulliPolicy(7)
    p.s = torch.rand(7, generator=_gen(1), dtype=torch.float64) * 0.9 + 0.05
    masks = p.sample(5, _gen(2))
    leaf = p.s.clone().requires_grad_(True)
    rows = [
        torch.autograd.grad(p.log_prob(masks[k : k + 1], leaf).sum(), leaf)[0] for k in range(5)
    ]
    assert_close(p.score(masks), torch.stack(rows), rtol=1e-12)


@pytest.mark.parametrize("mu", [0.0, 1e-3, 0.3, 0.5, 0.999, 1.0])
def test_truncated_gaussian_score_is_autograd_of_log_prob(mu):
    p = TruncatedGaussianPolicy(2, sigma=0.1)
    p.mu = torch.tensor([mu, 0.7], dtype=torch.float64)
    w = p.sample(6, _gen(3))
    leaf = p.mu.clone().requires_grad_(True)
    rows = [torch.autograd.grad(p.log_prob(w[k : k + 1], leaf).sum(), leaf)[0] for k in range(6)]
    assert_close(p.score(w), torch.stack(rows), rtol=1e-10)


@pytest.mark.parametrize("mu", [0.0, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("sigma", [0.1, 0.5])
def test_truncated_gaussian_density_integrates_to_one_and_score_has_mean_zero(mu, sigma):
    p = TruncatedGaussianPolicy(1, sigma=sigma)
    p.mu = torch.tensor([mu], dtype=torch.float64)

    def density(w):
        return math.exp(p.log_prob(torch.tensor([[w]], dtype=torch.float64)).item())

    def score_density(w):
        return p.score(torch.tensor([[w]], dtype=torch.float64)).item() * density(w)

    total, _ = integrate.quad(density, 0.0, 1.0, points=[mu], epsabs=1e-12)
    mean_score, _ = integrate.quad(score_density, 0.0, 1.0, points=[mu], epsabs=1e-12)
    assert total == pytest.approx(1.0, abs=1e-9)
    assert mean_score == pytest.approx(0.0, abs=1e-6 / sigma**2)


@pytest.mark.parametrize("mu", [0.0, 0.05, 0.5, 0.97])
def test_truncated_gaussian_samples_pass_ks_against_scipy(mu):
    sigma = 0.1
    p = TruncatedGaussianPolicy(1, sigma=sigma)
    p.mu = torch.tensor([mu], dtype=torch.float64)
    w = p.sample(4000, _gen(4)).squeeze(1)
    assert ((w >= 0) & (w <= 1)).all()
    a, b = -mu / sigma, (1 - mu) / sigma
    result = stats.kstest(w.numpy(), stats.truncnorm(a, b, loc=mu, scale=sigma).cdf)
    assert result.pvalue > 1e-3


def test_truncated_gaussian_log_z_is_finite_and_exact_in_both_tails():
    p = TruncatedGaussianPolicy(5, sigma=0.01)
    mu = torch.tensor([0.0, 1e-9, 0.5, 1 - 1e-9, 1.0], dtype=torch.float64)
    log_z = p.log_Z(mu)
    assert torch.isfinite(log_z).all()
    a, b = (-mu / 0.01).numpy(), ((1 - mu) / 0.01).numpy()
    expected = torch.tensor(
        [math.log(stats.norm.cdf(bb) - stats.norm.cdf(aa)) for aa, bb in zip(a, b)],
        dtype=torch.float64,
    )
    assert_close(log_z, expected, rtol=1e-12)
    # Far outside [0, 1] (only reachable before a projection), plain differences underflow to -inf.
    far = p.log_Z(torch.tensor([-0.5, 1.5], dtype=torch.float64))
    assert torch.isfinite(far).all()
    # Z = Phi(-50) - Phi(-150) for both; Phi(-150) is negligible next to Phi(-50).
    assert_close(far, torch.tensor([stats.norm.logsf(50)] * 2, dtype=torch.float64), rtol=1e-8)


def test_sampling_is_seeded_and_masks_are_never_empty():
    p = BernoulliPolicy(6, init=0.05)
    a, b = p.sample(200, _gen(5)), p.sample(200, _gen(5))
    assert torch.equal(a, b)
    assert a.any(dim=1).all()
    q = TruncatedGaussianPolicy(3)
    assert torch.equal(q.sample(10, _gen(6)), q.sample(10, _gen(6)))
    state = torch.random.get_rng_state()
    p.sample(3, _gen(7))
    assert torch.equal(state, torch.random.get_rng_state()), "global RNG touched"


@pytest.mark.parametrize("size", [1, 3, 9])
def test_capped_simplex_projection_is_exact_and_idempotent(size):
    p = BernoulliPolicy(10, subset_size=size)
    p.s = torch.randn(10, generator=_gen(size), dtype=torch.float64) * 2
    p.project_()
    assert p.s.sum().item() == pytest.approx(size, abs=1e-6)
    assert ((p.s >= 0) & (p.s <= 1)).all()
    once = p.s.clone()
    assert_close(p.project_().s, once, rtol=1e-12)
    box = BernoulliPolicy(4)
    box.s = torch.tensor([-0.5, 0.3, 1.7, 1.0], dtype=torch.float64)
    assert box.project_().s.tolist() == [0.0, 0.3, 1.0, 1.0]


def test_loo_estimator_equals_explicit_leave_one_out():
    values = torch.randn(5, generator=_gen(8), dtype=torch.float64)
    scores = torch.randn(5, 3, generator=_gen(9), dtype=torch.float64)
    explicit = sum((values[k] - (values.sum() - values[k]) / 4) * scores[k] for k in range(5)) / 5
    assert_close(policy_gradient(values, scores), explicit, rtol=1e-12)
    assert_close(
        policy_gradient(values, scores, baseline="none"),
        (values[:, None] * scores).mean(0),
        rtol=1e-12,
    )


def _reference_problem(n=8, d=3, seed=0):
    g = _gen(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    theta = torch.randn(d, generator=g, dtype=torch.float64)
    y = x @ theta + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
    x_val = torch.randn(20, d, generator=g, dtype=torch.float64)
    return LeastSquaresProblem(
        x, y, x_val, x_val @ theta, torch.zeros(d, dtype=torch.float64), eta=0.05
    )


@pytest.mark.parametrize("steps", [1, 5, 50])
def test_monte_carlo_gradient_matches_enumeration(steps):
    prob = _reference_problem()
    s = 0.2 + 0.6 * torch.rand(8, generator=_gen(10), dtype=torch.float64)
    _, exact = prob.exact(s, steps)
    table = prob.values(all_masks(8), steps)
    weights = 2 ** torch.arange(7, -1, -1)
    policy = BernoulliPolicy(8)
    policy.s = s.clone()
    g, R, K = _gen(11), 3000, 4
    estimates = []
    for _ in range(R):
        masks = policy.sample(K, g, allow_empty=True)
        values = table[(masks.long() * weights).sum(1)]
        estimates.append(policy_gradient(values, policy.score(masks)))
    est = torch.stack(estimates)
    se = est.std(0) / math.sqrt(R)
    assert ((est.mean(0) - exact).abs() <= 4 * se).all(), (est.mean(0), exact, se)
    assert (se < 0.5 * exact.abs().max()).all(), "too few rollouts to test anything"
