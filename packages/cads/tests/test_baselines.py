"""Static rules as pure functions."""

import math

import pytest
import torch
from cads.baselines import el2n_scores, forgetting_scores, full_data, keep_by_score, random_subset


def test_full_data_and_random_subset():
    assert full_data(4).tolist() == [0, 1, 2, 3]
    a = random_subset(100, 0.3, torch.Generator().manual_seed(0))
    b = random_subset(100, 0.3, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.numel() == 30 and a.unique().numel() == 30
    assert random_subset(10, 0.01, torch.Generator().manual_seed(0)).numel() == 1


def test_el2n_is_the_mean_error_norm_over_runs():
    probs = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]])
    labels = torch.tensor([0, 1])
    assert el2n_scores(probs, labels).tolist() == pytest.approx([math.sqrt(2) / 2, math.sqrt(0.5)])


def test_forgetting_counts_transitions_and_never_learned_is_infinite():
    correct = torch.tensor([[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0]], dtype=torch.bool)
    assert forgetting_scores(correct).tolist() == [2.0, 1.0, math.inf]


def test_keep_by_score_lowest_and_highest():
    s = torch.tensor([3.0, 1.0, 2.0, 1.0, math.inf])
    assert keep_by_score(s, 0.4).tolist() == [1, 3]
    assert keep_by_score(s, 0.4, keep="highest").tolist() == [0, 4]


@pytest.mark.parametrize(
    ("call", "exc", "name"),
    [
        (lambda: random_subset(10, 0.0, torch.Generator()), ValueError, "fraction"),
        (lambda: random_subset(10, 1.5, torch.Generator()), ValueError, "fraction"),
        (lambda: random_subset(0, 0.5, torch.Generator()), ValueError, "n"),
        (lambda: el2n_scores(torch.ones(2, 3, 4), torch.tensor([0, 1])), ValueError, "labels"),
        (
            lambda: el2n_scores(torch.ones(2, 3, 4), torch.tensor([0.0, 1.0, 2.0])),
            TypeError,
            "labels",
        ),
        (lambda: el2n_scores(torch.ones(2, 3, 4), torch.tensor([0, 1, 4])), ValueError, "labels"),
        (lambda: forgetting_scores(torch.ones(3, 2)), TypeError, "correct"),
        (lambda: keep_by_score(torch.ones(3), 0.5, keep="middle"), ValueError, "keep"),
    ],
)
def test_bad_input(call, exc, name):
    with pytest.raises(exc, match=name):
        call()
