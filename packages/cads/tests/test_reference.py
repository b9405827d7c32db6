"""The least-squares reference: closed-form A_B against the iteration, exact Phi and gradient."""

import pytest
import torch
from cads import BernoulliPolicy
from cads.reference import LeastSquaresProblem, all_masks

from neurips25_core.testing import assert_close


def _problem(n=6, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    return LeastSquaresProblem(
        x,
        y,
        torch.randn(7, d, generator=g, dtype=torch.float64),
        torch.randn(7, generator=g, dtype=torch.float64),
        torch.randn(d, generator=g, dtype=torch.float64),
        eta=0.1,
    )


@pytest.mark.parametrize(
    "mask", [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 1, 0, 1, 1, 0]]
)
@pytest.mark.parametrize("steps", [0, 1, 7, 60])
def test_closed_form_equals_gradient_descent(mask, steps):
    prob = _problem()
    m = torch.tensor(mask, dtype=torch.bool)
    assert_close(prob.train(m, steps), prob.train_iterative(m, steps), rtol=1e-10)


def test_empty_mask_keeps_theta0():
    prob = _problem()
    assert torch.equal(prob.train(torch.zeros(6, dtype=torch.bool), 10), prob.theta0)


def test_exact_gradient_equals_score_weighted_enumeration_and_finite_differences():
    prob = _problem()
    s = torch.tensor([0.2, 0.5, 0.7, 0.4, 0.9, 0.3], dtype=torch.float64)
    phi, grad = prob.exact(s, 5)
    masks = all_masks(6)
    f = prob.values(masks, 5)
    policy = BernoulliPolicy(6)
    policy.s = s.clone()
    p = policy.log_prob(masks).exp()
    assert phi == pytest.approx((p * f).sum().item(), rel=1e-12)
    assert_close(grad, (p[:, None] * f[:, None] * policy.score(masks)).sum(0), rtol=1e-10)
    h = 1e-6
    fd = torch.stack(
        [
            torch.tensor((prob.exact(s + h * e, 5)[0] - prob.exact(s - h * e, 5)[0]) / (2 * h))
            for e in torch.eye(6, dtype=torch.float64)
        ]
    )
    assert_close(grad, fd.double(), rtol=1e-6)
