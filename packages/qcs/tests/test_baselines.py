"""Selection rules of the simple baselines (pure functions of scores and features)."""

from __future__ import annotations

import math

import pytest
import torch
from qcs.baselines import (
    ifd_scores,
    ifd_selection,
    less_scores,
    less_selection,
    perplexity_selection,
    random_selection,
    rho1_token_mask,
)


def test_random_selection_budget_seed_and_uniformity():
    a = random_selection(50, 7, torch.Generator().manual_seed(0))
    b = random_selection(50, 7, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.numel() == 7 and a.unique().numel() == 7
    assert bool((a[1:] > a[:-1]).all())
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(10)
    for _ in range(2000):
        counts[random_selection(10, 3, g)] += 1
    # each index is kept with probability 0.3: 600 ± 4·sqrt(2000·0.3·0.7)
    assert bool(((counts - 600).abs() < 4 * math.sqrt(2000 * 0.21)).all()), counts


def test_perplexity_selection():
    losses = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0])
    assert perplexity_selection(losses, 2).tolist() == [1, 2]
    assert perplexity_selection(losses, 3, mode="middle").tolist() == [0, 2, 4]


def test_ifd_scores_and_selection():
    cond = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64)
    alone = torch.tensor([2.0, 2.0, 1.5, 1.0], dtype=torch.float64)
    ifd = ifd_scores(cond, alone)
    torch.testing.assert_close(ifd, torch.exp(cond - alone))
    # ratios: e^-1, 1, e^-1... index 1 (=1) and 3 (>1) are dropped; ties break to the lower index
    assert ifd_selection(ifd, 1).tolist() == [0]
    assert ifd_selection(ifd, 3).tolist() == [0, 2]  # only two remain


def test_less_matches_matching_py_semantics_on_toy_tensors():
    """Hand computation of matching.py: Σ_c η_c·(train @ val.T), reshape [n, S, -1].mean.max."""
    g = torch.Generator().manual_seed(0)
    C, n, S, per, d = 3, 6, 2, 4, 5
    tr = torch.nn.functional.normalize(
        torch.randn(C, n, d, generator=g, dtype=torch.float64), dim=-1
    )
    va = torch.nn.functional.normalize(
        torch.randn(C, S * per, d, generator=g, dtype=torch.float64), dim=-1
    )
    lrs = torch.tensor([2e-5, 1e-5, 5e-6], dtype=torch.float64)
    sub = torch.arange(S).repeat_interleave(per)  # contiguous, equal-size subtasks as in LESS
    eta = lrs / lrs.sum()
    infl = sum(eta[c] * tr[c] @ va[c].T for c in range(C))
    expected = infl.reshape(n, S, -1).mean(-1).max(-1).values
    out = less_scores(tr, va, lrs, sub, normalize=False)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    # the label-based grouping is independent of the order of validation examples
    perm = torch.randperm(S * per, generator=g)
    torch.testing.assert_close(
        less_scores(tr, va[:, perm], lrs, sub[perm], normalize=False), expected
    )
    # normalisation makes the score scale-free
    torch.testing.assert_close(less_scores(3 * tr, va, lrs, sub), expected)
    assert less_selection(out, 2).tolist() == sorted(torch.topk(out, 2).indices.tolist())


def test_rho1_keeps_top_excess_among_real_tokens():
    loss = torch.tensor([[3.0, 1.0, 9.0], [2.0, 5.0, 0.0]])
    ref = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    keep = rho1_token_mask(loss, ref, mask, 0.4)  # ⌈0.4·5⌉ = 2: excesses 2, 0, (pad), 2, 4, 0
    assert keep.tolist() == [[True, False, False], [False, True, False]]
    assert int(rho1_token_mask(loss, ref, mask, 1.0).sum()) == 5


def test_baseline_bad_input():
    with pytest.raises(ValueError, match="budget"):
        random_selection(5, 6)
    with pytest.raises(ValueError, match="mode"):
        perplexity_selection(torch.rand(4), 2, mode="high")
    with pytest.raises(ValueError, match="loss_alone"):
        ifd_scores(torch.rand(4), torch.rand(3))
    with pytest.raises(ValueError, match="val_features"):
        less_scores(
            torch.rand(2, 4, 3),
            torch.rand(2, 5, 4),
            torch.ones(2),
            torch.zeros(5, dtype=torch.long),
        )
    with pytest.raises(ValueError, match="checkpoint_weights"):
        less_scores(
            torch.rand(2, 4, 3),
            torch.rand(2, 5, 3),
            -torch.ones(2),
            torch.zeros(5, dtype=torch.long),
        )
    with pytest.raises(ValueError, match="token_ratio"):
        rho1_token_mask(torch.rand(2, 3), torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), 0.0)
