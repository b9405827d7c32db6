"""QCSSelector on the closed-form ridge toy problem: budgets, determinism, PBCS reduction."""

from __future__ import annotations

import pytest
import torch
from qcs import QCSConfig, QCSSelector
from qcs.reference import make_ridge_problem, objective, pbcs_sequence_reference

LENGTHS = [2, 3, 2, 3, 1, 3, 2, 2]


def _fns(prob, noise=0.0):
    """Rollout = exact ridge solve (+ optional noise from the global torch RNG, to test CRN)."""

    def train_fn(c):
        return objective(prob, c.double())

    def eval_fn(F_value):
        return float(F_value) + noise * float(torch.randn(()))

    return train_fn, eval_fn


def test_fit_respects_budgets_and_is_seeded():
    prob = make_ridge_problem(LENGTHS, seed=1)
    cfg = QCSConfig(budget=3, token_ratio=0.5, rollouts=4, outer_steps=5, inner_steps=1)
    train_fn, eval_fn = _fns(prob, noise=0.01)
    sel_a = QCSSelector(train_fn, eval_fn, cfg, seed=3, dtype=torch.float64)
    out_a = sel_a.fit(LENGTHS)
    out_b = QCSSelector(train_fn, eval_fn, cfg, seed=3, dtype=torch.float64).fit(LENGTHS)
    assert torch.equal(out_a.sequence_idx, out_b.sequence_idx)
    assert torch.equal(out_a.token_mask, out_b.token_mask)
    pol = sel_a.policy
    assert abs(float(pol.s.sum()) - 3) < 1e-6
    torch.testing.assert_close(pol.t.sum(-1), pol.token_budgets, rtol=0, atol=1e-6)
    assert float(pol.s.std()) > 0, "s did not move"
    assert out_a.sequence_idx.numel() == 3
    kept = out_a.token_mask.sum(-1)
    lengths = torch.tensor(LENGTHS)
    expected = torch.where(
        torch.zeros(8, dtype=torch.bool).index_fill(0, out_a.sequence_idx, True),
        torch.ceil(0.5 * lengths),
        torch.zeros(8),
    )
    assert kept.tolist() == expected.long().tolist()
    assert len(sel_a.history) == 5


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_sequence_only_reproduces_pbcs(noise):
    """α = 1: the selector's s trajectory equals a plain PBCS loop with the same seeds (1e-6)."""
    prob = make_ridge_problem(LENGTHS, seed=2)
    cfg = QCSConfig(
        budget=3, token_ratio=1.0, rollouts=4, outer_steps=6, inner_steps=1, outer_lr=0.05
    )
    train_fn, eval_fn = _fns(prob, noise)
    sel = QCSSelector(train_fn, eval_fn, cfg, seed=5, dtype=torch.float64)
    sel.fit(LENGTHS)
    traj = torch.stack([h["s"] for h in sel.history])
    ref = pbcs_sequence_reference(
        lambda c: eval_fn(train_fn(c)),
        sel.policy.token_mask,
        budget=3,
        rollouts=4,
        steps=6,
        lr=0.05,
        clip_norm=3.0,
        eps=0.1,
        seed=5,
    )
    torch.testing.assert_close(traj, ref, rtol=0, atol=1e-6)
    assert float((ref[-1] - 3 / 8).abs().max()) > 1e-3, "vacuous: s never moved"


def test_selector_bad_input():
    cfg = QCSConfig(budget=3)
    with pytest.raises(TypeError, match="train_fn"):
        QCSSelector(None, lambda m: 0.0, cfg)
    with pytest.raises(TypeError, match="config"):
        QCSSelector(lambda c: c, lambda m: 0.0, {"budget": 3})
    with pytest.raises(ValueError, match="budget"):
        QCSSelector(lambda c: c, lambda m: 0.0, cfg).fit([2, 2])


def test_full_budget_is_token_only_selection():
    """m = n: s stays at 1, every mask keeps every sequence, only t moves (spec §2 reduction)."""
    prob = make_ridge_problem(LENGTHS, seed=3)
    cfg = QCSConfig(budget=len(LENGTHS), token_ratio=0.5, rollouts=4, outer_steps=4, inner_steps=1)
    train_fn, eval_fn = _fns(prob)
    sel = QCSSelector(train_fn, eval_fn, cfg, seed=1, dtype=torch.float64, keep_trajectory=True)
    out = sel.fit(LENGTHS)
    for h in sel.history:
        assert torch.equal(h["s"], torch.ones(len(LENGTHS), dtype=torch.float64))
    assert out.sequence_idx.tolist() == list(range(len(LENGTHS)))
    t0 = 0.5 * sel.policy.token_mask.double()
    assert float((sel.history[-1]["t"] - t0).abs().max()) > 1e-3, "t never moved"


def test_final_sample_keeps_the_best_sampled_mask():
    """final="sample": the candidates are the next draws of the selector's generator from the
    learned policy, each scored under one seed; the kept one has the lowest F (hand loop)."""
    from qcs.ops import HierarchicalBernoulliPolicy, token_weights

    prob = make_ridge_problem(LENGTHS, seed=6)
    kw = dict(budget=3, token_ratio=0.5, rollouts=4, outer_steps=4, inner_steps=1)
    train_fn, eval_fn = _fns(prob, noise=0.01)
    top = QCSSelector(train_fn, eval_fn, QCSConfig(**kw), seed=2, dtype=torch.float64)
    top.fit(LENGTHS)
    cfg = QCSConfig(**kw, final="sample", sample_times=6)
    sel = QCSSelector(train_fn, eval_fn, cfg, seed=2, dtype=torch.float64)
    out = sel.fit(LENGTHS)
    torch.testing.assert_close(sel.policy.s, top.policy.s, rtol=0, atol=0)  # same outer loop
    # hand loop: replay the generator's draws (their count does not depend on s, t)
    gen = torch.Generator().manual_seed(2)
    shadow = HierarchicalBernoulliPolicy(LENGTHS, 3, 0.5, dtype=torch.float64)
    for _ in range(4):
        shadow.sample(4, gen)
    w, v = sel.policy.sample(6, gen)
    scores = []
    for k in range(6):
        c = token_weights(w[k], v[k], 0.1, sel.policy.token_mask)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2 * 1_000_003 + 4)
            scores.append(eval_fn(train_fn(c)) if w[k].any() else float("inf"))
    scores = torch.tensor(scores, dtype=torch.float64)
    torch.testing.assert_close(sel.final_scores, scores, rtol=0, atol=1e-12)
    best = int(scores.argmin())
    assert out.sequence_idx.tolist() == torch.nonzero(w[best]).squeeze(1).tolist()
    assert torch.equal(out.token_mask, v[best] & w[best][:, None])
    assert len(set(scores.tolist())) > 1, "vacuous: every candidate scored the same"


def test_inner_steps_reach_a_train_fn_that_takes_steps():
    prob = make_ridge_problem(LENGTHS, seed=1)
    seen = []

    def train_fn(c, steps):
        seen.append(steps)
        return objective(prob, c.double())

    cfg = QCSConfig(budget=3, rollouts=2, outer_steps=2, inner_steps=7)
    QCSSelector(train_fn, lambda F: float(F), cfg, dtype=torch.float64).fit(LENGTHS)
    assert seen == [7] * 4
    # a train_fn without a steps keyword is called with the weights only
    plain = QCSSelector(lambda c: objective(prob, c.double()), lambda F: float(F), cfg)
    plain.fit(LENGTHS)
    assert len(plain.history) == 2


def test_final_bad_input():
    with pytest.raises(ValueError, match="final"):
        QCSConfig(budget=3, final="best")
    with pytest.raises(ValueError, match="sample_times"):
        QCSConfig(budget=3, final="sample", sample_times=0)
