"""The DSIR peer (``data-selection``, the ``peers`` extra)."""

from __future__ import annotations

import hashlib
import itertools
import re
import sys

import numpy as np
import pytest
import torch
from qcs.peers import dsir_available, dsir_selection, pair_text
from qcs.tasks import make_instruction_pool, make_target_set

needs_dsir = pytest.mark.skipif(
    not dsir_available(),
    reason="data-selection (qcs's peers extra) is not installed: uv sync --all-packages --extra peers",
)


def _hand_log_weights(pool, target, buckets=10_000):
    """DSIR's hashed uni+bigram importance weights, written out from its paper/README."""

    def feats(text):
        words = re.findall(r"\w+|[^\w\s]+", text.lower())  # nltk's WordPunctTokenizer pattern
        grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        c = torch.zeros(buckets, dtype=torch.float64)
        for g in grams:
            c[int(hashlib.sha256(g.encode()).hexdigest(), 16) % buckets] += 1
        return c

    raw = torch.stack([feats(pair_text(p)) for p in pool])
    tgt = torch.stack([feats(pair_text(p)) for p in target]).sum(0)
    p_raw, p_tgt = raw.sum(0) / raw.sum(), tgt / tgt.sum()
    log_diff = torch.log(p_tgt + 1e-8) - torch.log(p_raw + 1e-8)
    return raw @ log_diff


@needs_dsir
def test_dsir_weights_equal_a_hand_computation_and_top_k_keeps_the_highest():
    pool, target = make_instruction_pool(60, seed=3), make_target_set(8)
    idx, log_w = dsir_selection(pool, target, 9, top_k=True)
    ref = _hand_log_weights(pool, target)
    assert log_w.shape == (60,)
    assert torch.allclose(log_w, ref, rtol=1e-9, atol=1e-9)
    assert idx.tolist() == sorted(torch.sort(-ref, stable=True).indices[:9].tolist())


@needs_dsir
def test_dsir_resampling_is_seeded_and_leans_to_the_target_families():
    pool, target = make_instruction_pool(120, seed=4), make_target_set(16)
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    a, _ = dsir_selection(pool, target, 20, seed=1)
    b, _ = dsir_selection(pool, target, 20, seed=1)
    assert torch.equal(a, b) and a.numel() == 20 and a.unique().numel() == 20
    assert (np.random.get_state()[1] == state).all()  # noqa: NPY002 (the caller's RNG is restored)
    on_target = sum(pool[i].family in ("add", "sort") for i in a.tolist()) / 20
    assert on_target > 2 / 6 + 0.25  # the pool has 1/3 add+sort


def test_dsir_bad_input_names_the_argument(monkeypatch):
    pool, target = make_instruction_pool(10), make_target_set(4)
    with pytest.raises(ValueError, match="budget"):
        dsir_selection(pool, target, 11)
    with pytest.raises(TypeError, match="pool"):
        dsir_selection("text", target, 2)
    with pytest.raises(TypeError, match="target"):
        dsir_selection(pool, [{"text": "x"}], 2)
    monkeypatch.setitem(sys.modules, "data_selection", None)
    assert not dsir_available()
    with pytest.raises(ImportError, match="peers"):
        dsir_selection(pool, target, 2)
