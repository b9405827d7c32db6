"""train_multibit: losses of each method at step 0, cost accounting, the coreset schedule, evaluate."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from multibitq import (
    CORESETS,
    BitwiseCoresetSampler,
    MultiBitConfig,
    convert_,
    current_bits,
    digits,
    evaluate,
    importance_scores,
    resnet_multibit,
    synthetic_images,
    train_multibit,
    using_bits,
)
from multibitq.training import _baseline_scores, _Forgetting, _logits_and_features

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models: a second intra-op thread only spin-waits (and costs CPU on a shared machine)
    with single_thread():
        yield


def _model(cfg, width=4, dtype=torch.float64):
    torch.manual_seed(0)
    return convert_(resnet_multibit(8, 1, 10, width), cfg).to(dtype)


def _data(n=40, dtype=torch.float64, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g, dtype=dtype), torch.arange(n) % 10


def _first_loss_by_hand(model, x, y, bits, method):
    """The loss of one full-data step, computed directly (train mode, batch statistics)."""
    model.train()
    total, previous = 0.0, None
    for b in bits:
        with using_bits(model, b):
            logits = model(x)
        if method == "anyprecision" and previous is not None:
            total += (-(previous * torch.log_softmax(logits, 1)).sum(1).mean()).item()
        else:
            total += F.cross_entropy(logits, y).item()
        previous = torch.softmax(logits, 1)
    return total


@pytest.mark.parametrize(
    ("method", "bn", "correction"),
    [
        ("joint", "shared", "mean_var"),
        ("joint", "shared", "none"),
        ("anyprecision", "switchable", "none"),
    ],
)
def test_first_step_loss_matches_direct_computation(method, bn, correction):
    cfg = MultiBitConfig(bits=(2, 4, 32), bn=bn, correction=correction)
    x, y = _data()
    model = _model(cfg)
    expected = _first_loss_by_hand(copy.deepcopy(model), x, y, cfg.bits, method)
    # batch_size = n: the first batch is a permutation of all the data; the loss is invariant
    hist = train_multibit(model, (x, y), cfg, method, epochs=1, batch_size=len(y))
    assert hist.steps == 1
    assert math.isclose(hist.losses[0], expected, rel_tol=1e-10)
    assert hist.train_passes == 3 * len(y) and hist.score_forwards == 0


def test_ours_cost_accounting_and_schedule():
    cfg = MultiBitConfig(bits=(2, 4, 32), prune_rate=0.5, rescore_every=2)
    x, y = _data(n=40)
    hist = train_multibit(
        _model(cfg), (x, y), cfg, "ours", epochs=4, batch_size=15, warmup_epochs=1
    )
    k = 20
    assert hist.subset_size == k and hist.steps == 4 * math.ceil(k / 15)
    assert hist.train_passes == 4 * 3 * k
    # warm-up epoch 0 unscored; scored at epochs 1 and 3 (every 2 after the warm-up), 3 children
    assert hist.score_forwards == 2 * 3 * 40
    assert len(hist.epoch_seconds) == 4 and hist.seconds >= sum(hist.epoch_seconds) * 0.99
    assert len(hist.subsets) == 4
    sampler = BitwiseCoresetSampler(y, k, cfg.bits)
    for epoch, subsets in enumerate(hist.subsets):
        assert set(subsets) == {2, 4, 32}
        for b, idx in subsets.items():
            assert idx.numel() == k and idx.unique().numel() == k
            counts = torch.bincount(y[idx], minlength=10)
            assert counts.tolist() == [sampler.quotas[c] for c in range(10)]
            if epoch == 0:  # warm-up: uniform draws of the sampler's stream
                assert torch.equal(idx, sampler.select(b, None, round=0))
    assert not torch.equal(hist.subsets[2][2], hist.subsets[2][4])  # bit-specific
    assert hist.sample_pass_equivalents == hist.train_passes + hist.score_forwards / 3


def test_ours_first_scored_subsets_use_the_importance_scores():
    cfg = MultiBitConfig(bits=(2, 32), prune_rate=0.5, rescore_every=10)
    x, y = _data(n=40)
    model = _model(cfg)
    snapshot = copy.deepcopy(model)
    # zero epochs of warm-up: the first subsets come from the untrained model's scores
    hist = train_multibit(model, (x, y), cfg, "ours", epochs=1, batch_size=64, warmup_epochs=0)
    sampler = BitwiseCoresetSampler(y, 20, cfg.bits)
    for b in cfg.bits:
        scores = importance_scores(snapshot, (x, y), b)
        assert torch.equal(hist.subsets[0][b], sampler.select(b, scores.double(), round=0))


@pytest.mark.parametrize("coreset", CORESETS)
def test_every_coreset_baseline_trains(coreset):
    cfg = MultiBitConfig(bits=(2, 32), prune_rate=0.5, rescore_every=1)
    x, y = _data(n=20)
    hist = train_multibit(
        _model(cfg), (x, y), cfg, "ours", epochs=2, batch_size=10, coreset=coreset
    )
    assert hist.coreset == coreset and len(hist.subsets) == 2 and hist.steps == 2
    assert all(math.isfinite(v) for v in hist.losses)
    if coreset == "shared":
        assert all(torch.equal(s[2], s[32]) for s in hist.subsets)
        assert hist.score_forwards == 20  # one scoring pass (largest bits) in epoch 1
    elif coreset in ("random", "forgetting"):
        assert hist.score_forwards == 0  # no extra forwards
    else:
        assert hist.score_forwards == 2 * 20  # epoch 1: one pass per child


def test_baseline_scores_formulas():
    cfg = MultiBitConfig(bits=(2, 32))
    x, y = _data(n=30)
    model = _model(cfg)
    logits, feats = _logits_and_features(model, x, 2)
    el2n = _baseline_scores("el2n", logits, feats, y)
    torch.testing.assert_close(
        el2n, importance_scores(model, (x, y), 2, "el2n"), rtol=1e-12, atol=0
    )
    p = torch.softmax(logits, 1)
    torch.testing.assert_close(
        _baseline_scores("entropy", logits, feats, y), -(p * p.log()).sum(1), rtol=1e-12, atol=0
    )
    moderate = _baseline_scores("moderate", logits, feats, y)
    for c in range(10):  # the sample nearest the median distance scores highest in its class
        members = torch.nonzero(y == c).reshape(-1)
        d = (feats[members] - feats[members].mean(0)).norm(dim=1)
        assert int(members[moderate[members].argmax()]) == int(
            members[(d - d.median()).abs().argmin()]
        )


def test_forgetting_counts_events():
    tracker = _Forgetting((2,), 4)
    idx = torch.tensor([0, 1, 2])
    tracker.update(2, idx, torch.tensor([True, True, False]))
    tracker.update(2, idx, torch.tensor([False, True, False]))
    tracker.update(2, idx, torch.tensor([True, False, False]))
    # sample 0 forgot once, 1 once, 2 never learned, 3 never seen (both count as most forgotten)
    assert tracker.scores(2).tolist() == [2.0, 2.0, 3.0, 3.0]


def test_dedicated_trains_one_model_per_bit_width():
    cfg = MultiBitConfig(bits=(2, 4, 32))
    x, y = _data()
    model = _model(cfg)
    init = copy.deepcopy(model.state_dict())
    hist = train_multibit(model, (x, y), cfg, "dedicated", epochs=1, batch_size=40)
    assert set(hist.models) == {2, 4, 32} and hist.models[32] is model
    assert len({id(m) for m in hist.models.values()}) == 3
    for b, m in hist.models.items():
        assert current_bits(m) == b
        assert not torch.equal(
            m.state_dict()["layers.0.conv0.weight"], init["layers.0.conv0.weight"]
        )
    assert hist.train_passes == 3 * len(y) and hist.steps == 3


def test_trains_under_no_grad():
    cfg = MultiBitConfig(bits=(2, 32))
    x, y = _data(n=20)
    model = _model(cfg)
    before = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        hist = train_multibit(model, (x, y), cfg, "joint", epochs=1, batch_size=20)
    assert hist.steps == 1
    assert not torch.equal(model.state_dict()["fc.weight"], before["fc.weight"])


@pytest.mark.slow
def test_learns_digits():
    train_set, test_set = digits()
    cfg = MultiBitConfig(bits=(4, 32), correction="mean_var")
    torch.manual_seed(0)
    model = convert_(resnet_multibit(8, 1, 10, 16), cfg)
    hist = train_multibit(model, train_set, cfg, "joint", epochs=5, batch_size=64)
    assert hist.losses[-1] < hist.losses[0]
    acc = evaluate(model, test_set, bits=(4, 32))
    assert min(acc.values()) > 0.5  # chance is 0.1


def test_evaluate_matches_argmax():
    cfg = MultiBitConfig(bits=(2, 32))
    x, y = _data(n=25)
    model = _model(cfg).eval()
    with torch.no_grad(), using_bits(model, 3):
        expected = (model(x).argmax(1) == y).double().mean().item()
    assert evaluate(model, (x, y), bits=3, batch_size=7) == pytest.approx(expected)
    assert evaluate(model, [(x[:10], y[:10]), (x[10:], y[10:])], bits=3) == pytest.approx(expected)
    assert set(evaluate(model, (x, y), bits=(3, 5, 6))) == {3, 5, 6}
    assert current_bits(model) == 32


def test_datasets():
    train_set, test_set = digits()
    assert len(train_set) == 1437 and len(test_set) == 360
    x = train_set.tensors[0]
    assert x.dtype == torch.float32 and float(x.min()) >= 0 and float(x.max()) <= 1
    counts = torch.bincount(test_set.tensors[1], minlength=10)
    assert int(counts.sum()) == 360 and int(counts.min()) >= 35  # stratified: ~36 per class
    a, b = synthetic_images(n=30, seed=1), synthetic_images(n=30, seed=1)
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])
    c = synthetic_images(n=30, seed=2)
    assert not torch.equal(a.tensors[0], c.tensors[0])
