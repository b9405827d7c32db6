"""Bad input raises a clear ValueError/TypeError naming the argument."""

from __future__ import annotations

import pytest
import torch
from qcs import (
    HierarchicalBernoulliPolicy,
    QCSConfig,
    hierarchical_policy_gradient,
    project_capped_simplex,
    token_weights,
    weighted_response_loss,
)


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        (dict(budget=0), ValueError, "budget"),
        (dict(budget=2.5), TypeError, "budget"),
        (dict(budget=3, token_ratio=0.0), ValueError, "token_ratio"),
        (dict(budget=3, token_ratio=1.5), ValueError, "token_ratio"),
        (dict(budget=3, elastic_eps=-0.1), ValueError, "elastic_eps"),
        (dict(budget=3, elastic_eps=0.6), ValueError, "elastic_eps"),
        (dict(budget=3, rollouts=1), ValueError, "rollouts"),
        (dict(budget=3, baseline="mean"), ValueError, "baseline"),
        (dict(budget=3, outer_lr=0.0), ValueError, "outer_lr"),
        (dict(budget=3, clip_norm=-1.0), ValueError, "clip_norm"),
        (dict(budget=3, final="best"), ValueError, "final"),
        (dict(budget=3, outer_steps=0), ValueError, "outer_steps"),
    ],
)
def test_config(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        QCSConfig(**kwargs)


def test_config_single_rollout_without_baseline_is_fine():
    assert QCSConfig(budget=3, rollouts=1, baseline="none").rollouts == 1


def test_policy_arguments():
    with pytest.raises(ValueError, match="budget"):
        HierarchicalBernoulliPolicy([2, 3], budget=3)
    with pytest.raises(ValueError, match="budget"):
        HierarchicalBernoulliPolicy([2, 3], budget=0)
    with pytest.raises(ValueError, match="token_ratio"):
        HierarchicalBernoulliPolicy([2, 3], budget=1, token_ratio=0)
    with pytest.raises(ValueError, match="token_lengths"):
        HierarchicalBernoulliPolicy([2, 0, 3], budget=1)
    with pytest.raises(TypeError, match="token_lengths"):
        HierarchicalBernoulliPolicy([2.5, 3.0], budget=1)
    with pytest.raises(TypeError, match="generator"):
        HierarchicalBernoulliPolicy([2, 3], budget=1).sample(2, generator=0)


def test_estimator_arguments():
    pol = HierarchicalBernoulliPolicy([2, 3], budget=1, dtype=torch.float64)
    w, v = pol.sample(1, torch.Generator().manual_seed(0))
    F = torch.ones(1, dtype=torch.float64)
    with pytest.raises(ValueError, match="leave-one-out"):
        hierarchical_policy_gradient(F, w, v, pol.s, pol.t, pol.token_mask, "loo")
    with pytest.raises(ValueError, match="baseline"):
        hierarchical_policy_gradient(F, w, v, pol.s, pol.t, pol.token_mask, "avg")
    with pytest.raises(ValueError, match="v"):
        hierarchical_policy_gradient(F, w, v[:, :, :2], pol.s, pol.t, pol.token_mask, "none")
    with pytest.raises(ValueError, match="F_values"):
        hierarchical_policy_gradient(F * float("nan"), w, v, pol.s, pol.t, pol.token_mask, "none")


def test_projection_arguments():
    x = torch.rand(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="total"):
        project_capped_simplex(x, 5)
    with pytest.raises(ValueError, match="total"):
        project_capped_simplex(x, -1)
    with pytest.raises(ValueError, match="method"):
        project_capped_simplex(x, 1, method="newton")
    with pytest.raises(TypeError, match="x"):
        project_capped_simplex(torch.arange(4), 1)
    with pytest.raises(ValueError, match="mask"):
        project_capped_simplex(x, 1, mask=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="x"):
        project_capped_simplex(torch.tensor([1.0, float("nan")]), 1)


def test_weights_and_loss_arguments():
    w = torch.ones(3, dtype=torch.bool)
    with pytest.raises(ValueError, match="elastic_eps"):
        token_weights(w, torch.ones(3, 2, dtype=torch.bool), 0.7)
    with pytest.raises(ValueError, match="v"):
        token_weights(w, torch.ones(2, 2, dtype=torch.bool), 0.1)
    logits = torch.randn(2, 5, 7)
    labels = torch.randint(0, 7, (2, 5))
    with pytest.raises(ValueError, match="weights"):
        weighted_response_loss(logits, labels, torch.ones(2, 4))
    with pytest.raises(ValueError, match="weights"):
        weighted_response_loss(logits, labels, -torch.ones(2, 5))
    with pytest.raises(TypeError, match="labels"):
        weighted_response_loss(logits, labels.float(), torch.ones(2, 5))
