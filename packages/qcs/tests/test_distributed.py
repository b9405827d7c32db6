"""Two gloo processes give the single-process s, t trajectory (rollouts split across ranks)."""

from __future__ import annotations

import torch
from qcs import QCSConfig, QCSSelector
from qcs.reference import make_ridge_problem, objective

from neurips25_core.distributed import run_distributed

LENGTHS = [2, 3, 2, 3, 1, 3]


def _run(rank, world_size, distributed=True):
    prob = make_ridge_problem(LENGTHS, seed=4)
    cfg = QCSConfig(
        budget=2,
        token_ratio=0.5,
        rollouts=4,
        outer_steps=3,
        inner_steps=1,
        final="sample",
        sample_times=4,
    )
    calls = []

    def train_fn(c):
        calls.append(1)
        return objective(prob, c.double())

    def eval_fn(F_value):  # rollout noise from the shared torch RNG (common random numbers)
        return float(F_value) + 0.05 * float(torch.randn(()))

    sel = QCSSelector(
        train_fn,
        eval_fn,
        cfg,
        seed=7,
        dtype=torch.float64,
        distributed=distributed,
        keep_trajectory=True,
    )
    out = sel.fit(LENGTHS)
    s = torch.stack([h["s"] for h in sel.history])
    t = torch.stack([h["t"] for h in sel.history])
    return s, t, out.sequence_idx, out.token_mask, sel.final_scores, len(calls)


def test_two_ranks_match_one_process():
    s1, t1, idx1, mask1, scores1, calls1 = _run(0, 1, distributed=False)
    ranks = run_distributed(_run, world_size=2)
    for s, t, idx, mask, scores, calls in ranks:
        torch.testing.assert_close(s, s1, rtol=0, atol=1e-6)
        torch.testing.assert_close(t, t1, rtol=0, atol=1e-6)
        assert torch.equal(idx, idx1)  # final="sample": the same candidates, the same winner
        assert torch.equal(mask, mask1)
        torch.testing.assert_close(scores, scores1, rtol=0, atol=1e-12)
        assert calls == calls1 // 2, "each rank must run half of the rollouts and candidates"
    assert float((s1[-1] - 2 / 6).abs().max()) > 1e-4, "vacuous: s never moved"
