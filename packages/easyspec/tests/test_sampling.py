"""The verification rule is exact: emitted tokens follow the base law whatever the draft is."""

from __future__ import annotations

import pytest
import torch
from easyspec import sampling_probs, verify_chain
from scipy.stats import chisquare


def _markov(v, seed, zeros=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(v, v, generator=g, dtype=torch.float64) + 0.05
    if zeros:
        t[:, 0] = 0.0
    return t / t.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    "case",
    [
        "random",
        pytest.param("q_zeros", marks=pytest.mark.slow),
        pytest.param("q_equals_p", marks=pytest.mark.slow),
    ],
)
def test_first_three_tokens_follow_base_law_monte_carlo(case):
    """Markov base P and draft Q over V = 5, gamma = 3: the law of the first three emitted
    tokens after state 0 equals P's chain law (chi-square; 6 000 runs by default, 20 000 in the slow cases)."""
    v, gamma, runs = 5, 3, 20000 if case != "random" else 6000
    P = _markov(v, 1)
    Q = P.clone() if case == "q_equals_p" else _markov(v, 2, zeros=case == "q_zeros")
    g = torch.Generator().manual_seed(3)
    counts = torch.zeros(v, v, v, dtype=torch.float64)
    for _ in range(runs):
        seq = [0]
        while len(seq) < 4:
            xs, qs, ps, s = [], [], [], seq[-1]
            for _ in range(gamma):
                qs.append(Q[s])
                ps.append(P[s])
                s = int(torch.multinomial(Q[s], 1, generator=g))
                xs.append(s)
            ps.append(P[s])
            k, y = verify_chain(torch.tensor(xs), torch.stack(qs), torch.stack(ps), g)
            seq += [*xs[:k], y]
        counts[seq[1], seq[2], seq[3]] += 1
    law = P[0][:, None, None] * P[:, :, None] * P[None, :, :]
    assert abs(float(law.sum()) - 1) < 1e-12
    _, pvalue = chisquare(counts.flatten().numpy(), (law.flatten() * runs).numpy())
    assert pvalue > 1e-3


def test_greedy_rule():
    p = torch.nn.functional.one_hot(torch.tensor([2, 1, 0, 3]), 4).double()
    q = torch.nn.functional.one_hot(torch.tensor([2, 1, 1]), 4).double()
    assert verify_chain(torch.tensor([2, 1, 1]), q, p) == (2, 0)
    assert verify_chain(torch.tensor([2, 1, 0]), q, p) == (3, 3)


def test_sampling_probs_transforms():
    logits = torch.tensor([[1.0, 3.0, 2.0, float("-inf")]])
    p = sampling_probs(logits, 0.8, top_k=2)
    assert p[0, 0] == 0 and p[0, 3] == 0 and torch.isclose(p.sum(), torch.tensor(1.0))
    p = sampling_probs(logits, 1.0, top_p=0.5)
    assert p[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert sampling_probs(logits.double(), 1.0).dtype == torch.float64


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p"),
        ({"temperature": 1.0, "top_p": 1.5}, "top_p"),
        ({"temperature": 1.0, "top_k": 0}, "top_k"),
    ],
)
def test_bad_sampling_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        sampling_probs(torch.zeros(3), **kwargs)


def test_verify_shapes_checked():
    with pytest.raises(ValueError, match="p:"):
        verify_chain(torch.tensor([0, 1]), torch.rand(2, 4), torch.rand(2, 4))
