"""Importance scores against torch.func / autograd, and the bit-wise coreset sampler."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from multibitq.data import BitwiseCoresetSampler, class_quotas, importance_scores
from multibitq.modules import MultiBitConfig, convert_, current_bits, resnet_multibit, using_bits
from torch.func import functional_call, grad, vmap
from torch.utils.data import TensorDataset

from neurips25_core.testing import assert_close, randint, randn


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = convert_(
        resnet_multibit(depth=8, in_channels=1, num_classes=5, width=4).double(),
        MultiBitConfig(bits=(2, 4, 32)),
    )
    x = randn(7, 1, 8, 8, seed=3, dtype=torch.float64)
    y = randint(0, 5, 7, seed=4)
    model.train()
    for bits in (32, 4, 2):  # non-trivial BN statistics
        with using_bits(model, bits):
            model(x)
    return model, x, y


def _classifier_grad_norms(model, x, y, bits):
    """Per-sample ‖∇_{fc.weight, fc.bias} CE‖ with torch.func (the reference)."""
    params = {k: v.detach() for k, v in model.fc.named_parameters()}
    rest = {f"fc.{k}": v for k, v in params.items()}

    def loss(p, xi, yi):
        full = {f"fc.{k}": v for k, v in p.items()}
        logits = functional_call(
            model, ({**dict(model.named_buffers()), **rest, **full},), (xi[None],)
        )
        return F.cross_entropy(logits, yi[None])

    model.eval()
    with using_bits(model, bits):
        grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return torch.sqrt(sum(g.reshape(len(y), -1).square().sum(1) for g in grads.values()))


@pytest.mark.parametrize("bits", [2, 32])
def test_closed_form_equals_per_sample_classifier_gradient_norm(setup, bits):
    model, x, y = setup
    model.train()
    scores = importance_scores(model, (x, y), bits, batch_size=5)
    assert model.training and current_bits(model) == 32  # restored
    assert scores.shape == (7,) and scores.dtype == torch.float64
    assert_close(scores, _classifier_grad_norms(model, x, y, bits), rtol=1e-10)


def test_el2n_is_the_error_vector_norm(setup):
    model, x, y = setup
    scores = importance_scores(model, TensorDataset(x, y), 4, score="el2n")
    model.eval()
    with using_bits(model, 4), torch.no_grad():
        p = torch.softmax(model(x), 1)
    assert_close(scores, (p - F.one_hot(y, 5).double()).norm(dim=1), rtol=1e-12)


def test_grad_full_equals_a_per_sample_autograd_loop(setup):
    model, x, y = setup
    model = copy.deepcopy(model)
    scores = importance_scores(model, (x[:4], y[:4]), 2, score="grad_full", batch_size=4)
    model.eval()
    expected = []
    with using_bits(model, 2):
        for i in range(4):
            loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
            grads = torch.autograd.grad(loss, list(model.parameters()))
            expected.append(torch.sqrt(sum(g.square().sum() for g in grads)))
    assert_close(scores, torch.stack(expected), rtol=1e-10)
    last = importance_scores(model, (x[:4], y[:4]), 2)
    assert (scores >= last * (1 - 1e-12)).all()  # the classifier's gradient is part of the full one


def test_class_quotas_are_proportional_within_one():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 17 + [3] * 3)
    for k in (4, 7, 10, 33, 99, 100):
        quotas = class_quotas(labels, k)
        assert sum(quotas.values()) == k
        for c, n_c in zip(range(4), (50, 30, 17, 3), strict=True):
            assert abs(quotas[c] - k * n_c / 100) < 1 and quotas[c] <= n_c


def test_sampler_draws_k_unique_indices_with_quotas_seeded_and_bit_specific():
    labels = randint(0, 7, 211, seed=1)
    scores = torch.rand(211, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    sampler = BitwiseCoresetSampler(labels, k=42, bits=(2, 4, 32), seed=5)
    for b in (2, 4, 32):
        for sc in (None, scores):
            idx = sampler.select(b, sc, round=3)
            assert idx.numel() == 42 and idx.unique().numel() == 42
            counts = torch.bincount(labels[idx], minlength=7)
            freq = torch.bincount(labels, minlength=7)
            assert ((counts - 42 * freq / 211).abs() < 1).all()
    a = sampler.select(2, scores, round=1)
    assert torch.equal(
        a, BitwiseCoresetSampler(labels, 42, (2, 4, 32), seed=5).select(2, scores, round=1)
    )
    assert not torch.equal(a, sampler.select(4, scores, round=1))
    assert not torch.equal(a, sampler.select(2, scores, round=2))
    assert not torch.equal(
        a, BitwiseCoresetSampler(labels, 42, (2, 4, 32), seed=6).select(2, scores, 1)
    )
    subsets = sampler.subsets({b: scores for b in (2, 4, 32)}, round=1)
    assert torch.equal(subsets[2], a)


def test_topk_takes_the_largest_scores_of_each_class():
    labels = randint(0, 3, 60, seed=3)
    scores = torch.rand(60, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    sampler = BitwiseCoresetSampler(labels, k=15, bits=(2,), selection="topk")
    idx = sampler.select(2, scores)
    for c, q in sampler.quotas.items():
        members = torch.nonzero(labels == c).reshape(-1)
        best = members[torch.argsort(scores[members], descending=True)[:q]]
        assert set(best.tolist()) == set(idx[labels[idx] == c].tolist())
    assert torch.equal(idx, sampler.select(2, scores, round=9))  # deterministic


def test_sampled_frequencies_are_proportional_to_scores():
    # one class, k = 1: Gumbel-top-1 picks i with probability exactly s_i / Σ s
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 5.0], dtype=torch.float64)
    sampler = BitwiseCoresetSampler(torch.zeros(6, dtype=torch.long), k=1, bits=(2,), seed=0)
    draws = 3000
    counts = torch.zeros(6, dtype=torch.float64)
    for r in range(draws):
        counts[sampler.select(2, scores, round=r)] += 1
    expected = draws * scores / scores.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 20.5  # 5 degrees of freedom, p = 0.001
    # k > 1 (sampling without replacement): inclusion frequency grows with the score
    sampler = BitwiseCoresetSampler(torch.zeros(8, dtype=torch.long), k=3, bits=(4,), seed=0)
    scores = torch.arange(1, 9, dtype=torch.float64)
    counts = torch.zeros(8)
    for r in range(1000):
        counts[sampler.select(4, scores, round=r)] += 1
    assert (counts.diff() > 0).all() and counts.sum() == 3000
    # a zero score is never preferred over a positive one ... but still possible in principle
    assert sampler.select(4, torch.tensor([0.0] * 5 + [1.0] * 3, dtype=torch.float64)).tolist() == [
        5,
        6,
        7,
    ]
