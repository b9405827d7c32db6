"""The budget, the log-linear inner value v_B and the penalty values."""

import math

import pytest
import torch
from cads import Budget, budget_min, fit_loglinear, penalty_values


def test_budget_counts_steps_times_batch():
    assert Budget(7, 32).examples == 224


@pytest.mark.parametrize(("a", "b"), [(3.0, 0.5), (-1.25, 2.0), (0.7, -0.3)])
def test_fit_loglinear_recovers_a_and_b(a, b):
    t = torch.tensor([1.0, 2.0, 5.0, 13.0, 40.0, 100.0])
    fa, fb = fit_loglinear(t, a - b * torch.log(t.double()))
    assert fa == pytest.approx(a, abs=1e-10)
    assert fb == pytest.approx(b, abs=1e-10)


def test_budget_min_is_at_most_observed_and_non_increasing_in_budget():
    t = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0, 20.0], dtype=torch.float64)
    noise = torch.tensor([0.03, -0.02, 0.01, 0.04, -0.03, 0.02], dtype=torch.float64)
    loss = 2.0 - 0.3 * torch.log(t) + noise
    for method in ("loglinear", "observed"):
        prev = math.inf
        for steps in (20, 25, 50, 100, 400, 1600):
            v = budget_min((t, loss), Budget(steps, 8), method=method)
            assert v <= loss.min().item() + 1e-15
            assert v <= prev + 1e-15
            prev = v
    a, b = fit_loglinear(t, loss)
    assert budget_min((t, loss), 100) == pytest.approx(
        min(a - b * math.log(100), loss.min().item())
    )
    assert budget_min((t, loss), 100, method="observed") == loss.min().item()


def test_budget_min_falls_back_to_observed_on_a_rising_curve():
    t = torch.tensor([1.0, 2.0, 4.0, 8.0])
    loss = torch.tensor([1.0, 1.1, 1.3, 1.2])
    assert budget_min((t, loss), 50) == pytest.approx(1.0)


def test_penalty_values_are_train_loss_minus_inner_value():
    g = torch.tensor([1.0, 2.0, 0.5])
    v = torch.tensor([0.5, 1.0, 0.5])
    assert penalty_values(g, v).tolist() == [0.5, 1.0, 0.0]
