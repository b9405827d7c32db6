"""The quality case's experiment: arms, weights, noise counts, statistics."""

from __future__ import annotations

import math

import pytest
import torch
from qcs.experiment import (
    ARMS,
    QualityExperiment,
    QualitySize,
    mean_ci,
    paired_bootstrap_diff,
)

from neurips25_core.models import tiny_llama, tiny_llama_config


def _size(**kw):
    args = dict(
        n_pool=30,
        n_val=4,
        n_test=6,
        budgets=(0.2,),
        arms=ARMS,
        seeds=(0,),
        cheap_seeds=(0, 1),
        outer_steps=1,
        rollouts=2,
        rollout_steps=1,
        final_steps=2,
        batch_size=4,
        less_epochs=1,
        rho1_steps=2,
        max_new_bytes=4,
    )
    args.update(kw)
    return QualitySize(**args)


@pytest.fixture(scope="module")
def exp():
    base = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2))
    return QualityExperiment(base, _size())


def test_mean_ci_is_the_student_t_interval():
    mean, half = mean_ci([1.0, 2.0, 4.0])
    sd = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    assert mean == pytest.approx(7 / 3)
    assert half == pytest.approx(4.302652729911275 * sd / math.sqrt(3), rel=1e-9)
    assert mean_ci([0.5]) == (0.5, None)
    with pytest.raises(ValueError, match="values"):
        mean_ci([])


def test_paired_bootstrap_difference_and_interval():
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(2, 300, generator=g) < 0.6).float()
    b = (torch.rand(2, 300, generator=g) < 0.4).float()
    diff, lo, hi = paired_bootstrap_diff(a, b)
    assert diff == pytest.approx(float((a - b).mean()))
    assert lo < diff < hi and hi - lo < 0.2
    assert paired_bootstrap_diff(a, a) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="a, b"):
        paired_bootstrap_diff(a, b[:, :10])
    with pytest.raises(TypeError, match="a, b"):
        paired_bootstrap_diff(a.numpy(), b)


def test_sequence_arms_keep_budget_rows_with_every_response_token(exp):
    for arm in ("random", "perplexity", "less"):
        w, seconds, _ = exp.select(arm, 6, seed=0)
        rows = w.sum(1) > 0
        assert int(rows.sum()) == 6 and seconds >= 0
        assert torch.equal(w[rows], exp.real[rows].float())  # weight 1 on every real token
        assert float(w[~rows].abs().sum()) == 0
    w, _, _ = exp.select("full", 6, seed=0)
    assert torch.equal(w, exp.real.float())
    a, _, _ = exp.select("random", 6, seed=0)
    b, _, _ = exp.select("random", 6, seed=0)
    assert torch.equal(a, b)


def test_rho1_arms_keep_a_ratio_of_tokens(exp):
    w, _, _ = exp.select("rho1_pool", 6, seed=0)
    assert set(w.unique().tolist()) <= {0.0, 1.0}
    assert int(w.sum()) == math.ceil(0.5 * int(exp.real.sum()))
    w, _, _ = exp.select("rho1_random", 6, seed=0)
    rows = w.sum(1) > 0
    assert int(rows.sum()) <= 6
    assert not bool((w.bool() & ~exp.real).any())


@pytest.mark.slow
def test_qcs_arm_uses_elastic_weights_on_budget_rows(exp):
    w, _, extra = exp.select("qcs", 6, seed=0)
    rows = w.sum(1) > 0
    assert int(rows.sum()) == 6
    assert {round(x, 6) for x in w[rows][exp.real[rows]].tolist()} <= {0.1, 0.9}
    assert extra["s"].shape == (30,) and float(extra["s"].sum()) == pytest.approx(6, abs=1e-4)
    w, _, _ = exp.select("qcs_seq", 6, seed=0)  # α = 1: every token of a kept row at 1 − ε
    rows = w.sum(1) > 0
    assert torch.allclose(w[rows], 0.9 * exp.real[rows].float())


def test_noise_kept_counts_wrong_rows_and_full_weight_filler(exp):
    w = exp.real.float().clone()
    wrong, filler = exp.noise_kept(w)
    assert wrong == pytest.approx(float(exp.wrong.float().mean()))
    assert filler == pytest.approx(float(exp.filler.sum() / exp.real.sum()))
    w2 = torch.where(exp.filler, 0.1, w)  # filler tokens down-weighted: not kept
    assert exp.noise_kept(w2)[1] == 0.0


@pytest.mark.slow
def test_run_arm_scores_a_fine_tuned_model(exp):
    r = exp.run_arm("random", 0.2, seed=1)
    assert r.budget == 6 and r.rows.numel() == 6
    assert math.isfinite(r.val_loss) and math.isfinite(r.test_loss)
    assert r.test_correct.shape == (6,) and r.test_correct.dtype == torch.bool
    assert 0.0 <= r.exact_match <= 1.0


def test_bad_input_names_the_argument(exp):
    with pytest.raises(ValueError, match="arms"):
        _size(arms=("random", "magic"))
    with pytest.raises(ValueError, match="budgets"):
        _size(budgets=(0.0,))
    with pytest.raises(TypeError, match="n_pool"):
        _size(n_pool=10.0)
    with pytest.raises(ValueError, match="arm"):
        exp.select("magic", 3, seed=0)
    with pytest.raises(ValueError, match="budget"):
        exp.select("random", 31, seed=0)
    with pytest.raises(TypeError, match="size"):
        QualityExperiment(exp.base, {"n_pool": 3})
