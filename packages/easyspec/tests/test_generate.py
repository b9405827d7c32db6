"""Draft executor vs HF forward, backends vs sequential, calibration invariant, lossless greedy."""

from __future__ import annotations

import pytest
import torch
from easyspec import FuzzyDraft, autoregressive_generate, speculative_generate

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close


def _model(layers, width=32, heads=4, kv=2, seed=0, dtype=torch.float64, vocab=256):
    cfg = tiny_llama_config(
        hidden_size=width,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        vocab_size=vocab,
        max_position_embeddings=128,
    )
    return tiny_llama(cfg, seed=seed).to(dtype).eval()


IDS = torch.tensor([[5, 17, 200, 3, 99, 42, 7, 8, 250]])


def test_executor_matches_hf_forward():
    m = _model(6, dtype=torch.float32)
    ref = m(IDS).logits[0].detach()
    d = FuzzyDraft(m, group_size=1)
    assert_close(d.prefill(IDS), ref)
    d.prefill(IDS[:, :4])
    steps = torch.stack([d.step(int(t)) for t in IDS[0, 4:]])
    assert_close(steps, ref[4:])


@pytest.mark.parametrize("merge", ["interleave", "sum_first"])
def test_group_size_one_is_exact_and_fuzzy_differs(merge):
    m = _model(6)
    ref = m(IDS).logits[0].detach()
    exact = FuzzyDraft(m, group_size=1, merge=merge)
    exact.prefill(IDS[:, :4])
    out = torch.stack([exact.step(int(t)) for t in IDS[0, 4:]])
    assert_close(out, ref[4:], rtol=1e-6)
    fuzzy = FuzzyDraft(m, group_size=4, merge=merge)
    assert fuzzy.groups == [[0], [1, 2, 3, 4], [5]]
    fuzzy.prefill(IDS[:, :4])
    out = torch.stack([fuzzy.step(int(t)) for t in IDS[0, 4:]])
    assert (out - ref[4:]).norm() / ref[4:].norm() > 1e-4


@pytest.mark.parametrize("group_size", [2, 3])
def test_stacked_equals_sequential(group_size):
    m = _model(7, dtype=torch.float32)
    outs = []
    for backend in ("sequential", "stacked"):
        d = FuzzyDraft(m, group_size=group_size, backend=backend)
        d.prefill(IDS[:, :3])
        outs.append(torch.stack([d.step(int(t)) for t in IDS[0, 3:]]))
    assert_close(outs[1], outs[0])


def test_calibration_restores_exact_cache_and_truncation():
    m = _model(6)
    d = FuzzyDraft(m, group_size=4)
    d.prefill(IDS[:, :4])
    for t in IDS[0, 4:7]:
        d.step(int(t))  # fuzzy K/V at positions 4..6
    d.truncate(4)
    d.calibrate(IDS[0, 4:])
    fresh = FuzzyDraft(m, group_size=1)
    fresh.prefill(IDS)
    for layer in range(6):
        for a, b in zip(d.cache(layer), fresh.cache(layer)):
            assert_close(a, b, rtol=1e-12)
    d.truncate(2)
    assert d.length == 2 and d.cache(0)[0].shape[1] == 2
    with pytest.raises(ValueError, match="pos"):
        d.truncate(5)


@pytest.mark.parametrize("group_size", [1, 2, 4])
@pytest.mark.parametrize("calibrate", [True, False])
def test_greedy_lossless_vs_transformers_generate(group_size, calibrate):
    base = _model(2, seed=1)
    draft = _model(6, seed=2)
    ref = base.generate(IDS, max_new_tokens=24, do_sample=False)
    out, stats = speculative_generate(
        base, draft, IDS, gamma=3, group_size=group_size, calibrate=calibrate, max_new_tokens=24
    )
    assert torch.equal(out, ref)
    assert torch.equal(autoregressive_generate(base, IDS, max_new_tokens=24), ref)
    assert stats.iterations == stats.base_forwards - 1


def test_self_draft_accepts_everything():
    base = _model(3, seed=1)
    out, stats = speculative_generate(base, base, IDS, gamma=4, group_size=1, max_new_tokens=20)
    assert stats.acceptance_rate == 1.0 and stats.mean_accepted_length == 5.0
    assert torch.equal(out, base.generate(IDS, max_new_tokens=20, do_sample=False))


def test_sampling_runs_and_is_seeded():
    base, draft = _model(2, seed=1), _model(4, seed=2)
    kw = dict(gamma=3, temperature=0.8, top_p=0.9, max_new_tokens=12, group_size=2)
    a, _ = speculative_generate(base, draft, IDS, generator=torch.Generator().manual_seed(0), **kw)
    b, _ = speculative_generate(base, draft, IDS, generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(a, b) and a.shape == (1, IDS.shape[1] + 12)


def test_bad_input():
    base, draft = _model(2, seed=1), _model(4, seed=2)
    with pytest.raises(ValueError, match="group_size"):
        FuzzyDraft(draft, group_size=0)
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(base, draft, IDS, gamma=0)
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(base, _model(4, vocab=300), IDS)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(base, draft, IDS, temperature=-0.5)
    with pytest.raises(ValueError, match="top_p"):
        speculative_generate(base, draft, IDS, temperature=1.0, top_p=2.0)
    with pytest.raises(ValueError, match="ids"):
        speculative_generate(base, draft, torch.tensor([[1, 256]]))
    with pytest.raises(TypeError, match="model"):
        FuzzyDraft(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="backend"):
        FuzzyDraft(draft, backend="nccl")
