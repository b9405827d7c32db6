"""Predictor: text building (word budget, "..." trimming), the hashing encoder, seeded training."""

import numpy as np
import pytest
import torch
from lpc.predictor import (
    JOIN,
    ContinuationMLP,
    HashingTextEncoder,
    Predictor,
    TurnOnlyPredictor,
    build_predictor_text,
    request_features,
    train_predictor,
)
from lpc.trace import make_synthetic_trace


def test_word_budget_and_ellipsis_trimming_are_exact():
    msgs = [" ".join(f"a{i}" for i in range(10)), "b0 b1", " ".join(f"c{i}" for i in range(7))]
    text = build_predictor_text(msgs, word_budget=12)  # n = 3 -> 4 words each
    parts = text.removeprefix("query: ").split(JOIN)
    assert text.startswith("query: ")
    assert parts == ["a0 a1 ... a8 a9", "b0 b1", "c0 c1 ... c5 c6"]
    odd = build_predictor_text(["w0 w1 w2 w3 w4 w5 w6"], word_budget=5)  # 2 first + 3 last
    assert odd == "query: w0 w1 ... w4 w5 w6"
    six = [f"m{i}" for i in range(6)]
    assert build_predictor_text(six).removeprefix("query: ").split(JOIN) == six[1:]  # last five
    assert build_predictor_text(["x y z"], word_budget=3) == "query: x y z"


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (("hello",), TypeError, "user_msgs"),
        (([],), ValueError, "user_msgs"),
        ((["a"], 0), ValueError, "max_msgs"),
        ((["a"], 5, 0), ValueError, "word_budget"),
    ],
)
def test_build_text_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        build_predictor_text(*args)


def test_hashing_encoder_equals_sklearn_on_whole_texts():
    enc = HashingTextEncoder(64)
    texts = [
        "Query: This raises an ERROR\nThe next user query is: now also",
        "thanks, that's all",
        "",
    ]
    got = enc(texts)
    ref = (enc._words.transform(texts) + enc._chars.transform(texts)).toarray()
    ref = ref / np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1e-12)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    assert got.dtype == np.float32 and got.shape == (3, 64)
    with pytest.raises(ValueError, match="dim"):
        HashingTextEncoder(0)


def test_mlp_shape_parameter_count_and_wrong_width():
    m = ContinuationMLP()
    assert sum(p.numel() for p in m.parameters()) < 80_000
    assert m(torch.zeros(3, 385)).shape == (3, 2)
    with pytest.raises(ValueError, match="x"):
        m(torch.zeros(3, 384))
    pred = Predictor(HashingTextEncoder(384), m)
    with pytest.raises(ValueError, match="features"):
        pred.predict_features(np.zeros((2, 100), np.float32))


def test_seeded_training_repeats_and_learns_a_cue():
    rng = np.random.default_rng(0)
    n = 600
    y = (rng.random(n) < 0.6).astype(int)
    x = rng.normal(size=(n, 9)).astype(np.float32)
    x[:, 0] += 1.5 * y  # a learnable signal
    m1, r1 = train_predictor(x, y, epochs=4, seed=3, lr=1e-2)
    m2, r2 = train_predictor(x, y, epochs=4, seed=3, lr=1e-2)
    for a, b in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert r1.best_epoch == r2.best_epoch and r1.val_metrics == r2.val_metrics
    assert r1.val_metrics["mcc"] > 0.3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"features": np.zeros(5), "labels": np.zeros(5)}, "features"),
        ({"features": np.zeros((5, 3)), "labels": np.zeros(4)}, "labels"),
        ({"features": np.zeros((5, 3)), "labels": np.array([0, 1, 2, 0, 1])}, "labels"),
        ({"features": np.zeros((5, 3)), "labels": np.zeros(5)}, "labels"),
    ],
)
def test_train_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_predictor(**kwargs)


def test_predictor_on_requests_and_turn_only_baseline():
    trace = make_synthetic_trace(15, seed=1)
    enc = HashingTextEncoder(32)
    pred = Predictor(enc, ContinuationMLP(33, hidden=8).eval())
    p = pred.predict_requests(trace)
    np.testing.assert_allclose(p, pred.predict_features(request_features(enc, trace)), rtol=1e-12)
    assert p.shape == (len(trace),) and ((p > 0) & (p < 1)).all()
    turn = TurnOnlyPredictor.fit([r.turn for r in trace], [r.has_next for r in trace])
    q = turn.predict_requests(trace)
    assert ((q > 0) & (q < 1)).all()
    with pytest.raises(ValueError, match="turns"):
        pred.predict(["a", "b"], [0])
