"""neurips25_core.dsir: DSIR over plain texts through ``data-selection`` (an optional peer)."""

from __future__ import annotations

import hashlib
import itertools
import re
import sys

import numpy as np
import pytest
import torch

from neurips25_core.dsir import dsir_available, dsir_select

needs_dsir = pytest.mark.skipif(
    not dsir_available(),
    reason="data-selection is not installed (a package's peers extra: uv sync --all-packages --extra peers)",
)

_WORDS = ["alpha", "beta", "gamma", "delta", "def", "return", "class", "import", "(", ")", ":"]


def _texts(n: int, seed: int, words=_WORDS) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    return [
        " ".join(words[int(i)] for i in torch.randint(0, len(words), (int(k),), generator=gen))
        for k in torch.randint(3, 12, (n,), generator=gen)
    ]


def _hand_log_weights(raw, target, buckets=10_000):
    """DSIR's hashed uni+bigram importance weights, written out from its paper/README."""

    def feats(text):
        words = re.findall(r"\w+|[^\w\s]+", text.lower())  # nltk's WordPunctTokenizer pattern
        grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        c = torch.zeros(buckets, dtype=torch.float64)
        for g in grams:
            c[int(hashlib.sha256(g.encode()).hexdigest(), 16) % buckets] += 1
        return c

    r = torch.stack([feats(t) for t in raw])
    tgt = torch.stack([feats(t) for t in target]).sum(0)
    p_raw, p_tgt = r.sum(0) / r.sum(), tgt / tgt.sum()
    return r @ (torch.log(p_tgt + 1e-8) - torch.log(p_raw + 1e-8))


@needs_dsir
def test_weights_equal_a_hand_computation_and_top_k_keeps_the_highest():
    raw, target = _texts(50, 1), _texts(6, 2, words=_WORDS[:4])
    idx, log_w = dsir_select(raw, target, 7, top_k=True)
    ref = _hand_log_weights(raw, target)
    assert log_w.shape == (50,) and log_w.dtype == torch.float64
    assert torch.allclose(log_w, ref, rtol=1e-9, atol=1e-9)
    assert idx.tolist() == sorted(torch.sort(-ref, stable=True).indices[:7].tolist())


@needs_dsir
def test_resampling_is_seeded_restores_numpy_and_leans_to_the_target():
    raw = _texts(40, 3, words=_WORDS[:4]) + _texts(80, 4, words=_WORDS[4:])
    target = _texts(10, 5, words=_WORDS[:4])
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    a, _ = dsir_select(raw, target, 20, seed=1)
    b, _ = dsir_select(raw, target, 20, seed=1)
    c, _ = dsir_select(raw, target, 20, seed=2)
    assert torch.equal(a, b) and a.numel() == 20 and a.unique().numel() == 20
    assert not torch.equal(a, c)
    assert (np.random.get_state()[1] == state).all()  # noqa: NPY002
    assert (a < 40).float().mean() > 1 / 3 + 0.25  # a third of the pool is on-target


def test_bad_input_names_the_argument(monkeypatch):
    raw, target = _texts(5, 0), _texts(2, 1)
    with pytest.raises(ValueError, match="k"):
        dsir_select(raw, target, 6)
    with pytest.raises(ValueError, match="k"):
        dsir_select(raw, target, 0)
    with pytest.raises(TypeError, match="raw"):
        dsir_select("text", target, 2)
    with pytest.raises(TypeError, match="target"):
        dsir_select(raw, [b"bytes"], 2)
    with pytest.raises(TypeError, match="top_k"):
        dsir_select(raw, target, 2, top_k=1)
    with pytest.raises(ValueError, match="num_buckets"):
        dsir_select(raw, target, 2, num_buckets=1)
    monkeypatch.setitem(sys.modules, "data_selection", None)
    assert not dsir_available()
    with pytest.raises(ImportError, match="peers"):
        dsir_select(raw, target, 2)
