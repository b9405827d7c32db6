"""Bad input raises ValueError/TypeError naming the argument, before anything is modified."""

import pytest
import torch
from cads import (
    BernoulliPolicy,
    Budget,
    TruncatedGaussianPolicy,
    budget_min,
    fit_loglinear,
    penalty_values,
    policy_gradient,
)
from cads.reference import LeastSquaresProblem, all_masks

G = torch.Generator().manual_seed(0)
T = torch.tensor([1.0, 2.0, 4.0])
L = torch.tensor([1.0, 0.8, 0.7])


@pytest.mark.parametrize(
    ("call", "exc", "name"),
    [
        (lambda: Budget(0, 32), ValueError, "steps"),
        (lambda: Budget(10, 0), ValueError, "batch_size"),
        (lambda: Budget(2.5, 32), TypeError, "steps"),
        (lambda: BernoulliPolicy(0), ValueError, "n"),
        (lambda: BernoulliPolicy(4, init=1.5), ValueError, "init"),
        (lambda: BernoulliPolicy(4, subset_size=5), ValueError, "subset_size"),
        (lambda: BernoulliPolicy(4).sample(0, G), ValueError, "K"),
        (lambda: BernoulliPolicy(4).sample(2, 0), TypeError, "generator"),
        (lambda: BernoulliPolicy(4).score(torch.ones(2, 3)), ValueError, "samples"),
        (lambda: BernoulliPolicy(4).score(torch.full((2, 4), 0.5)), ValueError, "samples"),
        (lambda: BernoulliPolicy(2, init=0.0).sample(1, G), ValueError, "s_i"),
        (lambda: TruncatedGaussianPolicy(0), ValueError, "S"),
        (lambda: TruncatedGaussianPolicy(3, sigma=0.0), ValueError, "sigma"),
        (lambda: TruncatedGaussianPolicy(3, sigma=-1.0), ValueError, "sigma"),
        (lambda: TruncatedGaussianPolicy(3).score(torch.full((2, 3), 1.5)), ValueError, "samples"),
        (lambda: policy_gradient(torch.ones(1), torch.ones(1, 3)), ValueError, "loo"),
        (lambda: policy_gradient(torch.ones(3), torch.ones(2, 3)), ValueError, "scores"),
        (
            lambda: policy_gradient(torch.ones(3), torch.ones(3, 3), baseline="mean"),
            ValueError,
            "baseline",
        ),
        (lambda: policy_gradient([1.0, 2.0], torch.ones(2, 3)), TypeError, "values"),
        (lambda: fit_loglinear(T[:2], L[:2]), ValueError, "t"),
        (lambda: fit_loglinear(torch.tensor([0.0, 1.0, 2.0]), L), ValueError, "t"),
        (lambda: fit_loglinear(T, L[:2]), ValueError, "loss"),
        (lambda: budget_min((T, L), 0), ValueError, "budget"),
        (lambda: budget_min((T, L), 2), ValueError, "budget"),
        (lambda: budget_min((T, L), 10, method="fit"), ValueError, "method"),
        (lambda: budget_min(T, 10), TypeError, "curve"),
        (lambda: penalty_values(torch.ones(3), torch.ones(2)), ValueError, "inner_values"),
        (lambda: all_masks(13), ValueError, "n"),
        (
            lambda: LeastSquaresProblem(
                torch.ones(4, 2),
                torch.ones(4),
                torch.ones(3, 2),
                torch.ones(3),
                torch.zeros(2),
                eta=0.0,
            ),
            ValueError,
            "eta",
        ),
        (
            lambda: LeastSquaresProblem(
                torch.ones(4, 2),
                torch.ones(5),
                torch.ones(3, 2),
                torch.ones(3),
                torch.zeros(2),
                eta=0.1,
            ),
            ValueError,
            "y",
        ),
    ],
)
def test_bad_input_names_the_argument(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_failed_projection_input_leaves_policy_untouched():
    p = BernoulliPolicy(4, init=0.3)
    before = p.s.clone()
    with pytest.raises(ValueError):
        p.score(torch.ones(2, 5))
    assert torch.equal(p.s, before)
