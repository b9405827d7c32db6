"""The digits experiment's pieces: arms, deployment, callbacks, intervals."""

import pytest
import torch
from cads import BernoulliPolicy, Budget, BudgetedPBCS, CADSConfig, TrainingValue
from cads.digits import mlp_factory, noisy_digits
from cads.experiment import ARMS, deploy, deploy_mask, mean_ci, select
from cads.solver import CADS
from torch import nn


@pytest.fixture(scope="module")
def small():
    return noisy_digits(pool=60, val=20, test=20), mlp_factory(0, hidden=8)


def test_deploy_mask_thresholds_and_falls_back_to_the_top_half():
    assert deploy_mask(torch.tensor([0.2, 0.5, 0.7])).tolist() == [False, True, True]
    assert deploy_mask(torch.tensor([0.1, 0.3, 0.2, 0.0])).tolist() == [False, True, True, False]


def test_static_arms_select_what_their_rule_says(small):
    data, factory = small
    sel = {arm: select(arm, factory, data, 4, 0, 2, 2, 4) for arm in ("full", "random_30")}
    assert torch.equal(sel["full"], torch.arange(60)) and sel["random_30"].numel() == 18
    assert select("el2n_low", factory, data, 4, 0, 2, 2, 4).numel() == 30
    again = select("random_30", factory, data, 4, 0, 2, 2, 4)
    assert torch.equal(again, sel["random_30"])
    out = deploy(factory, data, sel["full"], 4, seed=1)
    assert 0.0 <= out["val_acc"] <= 1.0 and out == deploy(factory, data, sel["full"], 4, seed=1)


def test_searched_arms_return_a_mask_or_source_weights(small):
    data, factory = small
    assert select("cads_e", factory, data, 5, 0, 2, 2, 4).dtype == torch.bool
    weights = select("cads_s", factory, data, 5, 0, 2, 2, 4)
    assert weights.is_floating_point() and weights.shape == (8,)
    assert select("pbcs", factory, data, 3, 0, 2, 2, 4).shape == (60,)
    with pytest.raises(ValueError, match="arm"):
        select("nope", factory, data, 5, 0, 2, 2, 4)
    assert set(ARMS) >= {"full", "cleanlab", "pbcs", "cads_e", "cads_s"}


def test_callbacks_see_every_step_and_change_nothing(small):
    data, factory = small
    cfg = CADSConfig(Budget(5, 8), outer_steps=3)

    def cads(callback=None):
        solver = CADS(factory, nn.functional.cross_entropy, data.train, data.val, cfg)
        return solver.fit(torch.Generator().manual_seed(0), callback=callback).param

    seen = []
    with_cb = cads(lambda step, policy: seen.append((step, policy.s.clone())))
    assert [s for s, _ in seen] == [0, 1, 2] and torch.equal(seen[-1][1], with_cb)
    assert torch.equal(with_cb, cads())

    def pbcs(callback=None):
        value = TrainingValue(
            factory, nn.functional.cross_entropy, data.train, data.val, Budget(3, 8)
        )
        policy = BernoulliPolicy(60)
        BudgetedPBCS(value, policy, outer_steps=2, rollouts=2).fit(
            torch.Generator().manual_seed(0), callback=callback
        )
        return policy.s

    steps = []
    assert torch.equal(pbcs(lambda step, policy: steps.append(step)), pbcs())
    assert steps == [0, 1]
    with pytest.raises(TypeError, match="callback"):
        pbcs(callback=3)
    with pytest.raises(TypeError, match="callback"):
        cads(callback="no")


def test_mean_ci_matches_scipy_and_checks_input():
    from scipy import stats

    values = [0.81, 0.84, 0.79, 0.9]
    mean, half = mean_ci(values)
    low, high = stats.t.interval(0.95, 3, loc=mean, scale=stats.sem(values))
    assert mean == pytest.approx(sum(values) / 4) and half == pytest.approx((high - low) / 2)
    assert mean_ci([0.5]) == (0.5, 0.0)
    with pytest.raises(ValueError, match="values"):
        mean_ci([])
