"""The suite's data and layout helpers."""

import pytest
import torch
from jetnemotron.bench import SUITE, recall_eval, recall_rows, uniform_layout


def test_recall_rows_answer_every_query_from_the_context():
    w, mark = recall_rows(3, 60, torch.Generator().manual_seed(0), pairs=5)
    assert w.shape == mark.shape == (3, 61)
    for row, m in zip(w.tolist(), mark.tolist(), strict=True):
        # context: 5 pair bytes 128 + key·16 + value, then "|"
        table = {(t - 128) // 16: (t - 128) % 16 for t in row[:5]}
        assert len(table) == 5 and row[5] == ord("|")
        answers = [i for i, flag in enumerate(m) if flag]
        assert answers and all(row[i] == ord("a") + table[row[i - 1] - ord("A")] for i in answers)
        assert not any(m[:6])


def test_recall_rows_bad_pairs():
    with pytest.raises(ValueError, match="pairs"):
        recall_rows(1, 20, torch.Generator(), pairs=9)


def test_recall_eval_labels_only_the_answers():
    x, y = recall_eval(2, 40)
    assert x.shape == y.shape == (2, 40)
    keep = y != -100
    assert keep.any() and (~keep).any()


def test_uniform_layout_is_every_lk_th_layer():
    assert uniform_layout(4, 1) == (0, 0, 0, 1)
    assert uniform_layout(8, 2) == (0, 0, 0, 1, 0, 0, 0, 1)
    assert sum(uniform_layout(28, 2)) == 2


def test_suite_cases():
    assert SUITE.name == "jetnemotron"
    assert {c.name for c in SUITE.cases} == {"postnas", "ops_speed", "decode_speed"}
