"""The gloo backend: one process per group slot equals the in-process sequential draft."""

from __future__ import annotations

import pytest
import torch
from easyspec import FuzzyDraft, speculative_generate
from easyspec.dist import run_layer_parallel

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close

IDS = torch.tensor([[5, 17, 200, 3, 99, 42, 7, 8, 250]])


def _model(layers, seed, dtype=torch.float32):
    cfg = tiny_llama_config(
        hidden_size=32, num_layers=layers, num_heads=4, num_kv_heads=2, max_position_embeddings=128
    )
    return tiny_llama(cfg, seed=seed).to(dtype).eval()


def _fuzzy_run(draft: FuzzyDraft):
    """Prefill, fuzzy steps, a truncation + calibration, more fuzzy steps: all logits."""
    out = [draft.prefill(IDS[:, :3])]
    out += [draft.step(int(t))[None] for t in IDS[0, 3:6]]
    draft.truncate(4)
    out.append(draft.calibrate(IDS[0, 4:6]))
    out += [draft.step(int(t))[None] for t in IDS[0, 6:]]
    return torch.cat(out)


def _rank_fn(rank, world_size, layers):
    torch.manual_seed(1234 + rank)  # ranks must not depend on a shared global seed
    d = FuzzyDraft(_model(layers, seed=2), group_size=world_size, backend="gloo")
    logits = _fuzzy_run(d)
    base = _model(2, seed=1)
    ids, stats = speculative_generate(
        base,
        FuzzyDraft(_model(layers, seed=2), group_size=world_size, backend="gloo"),
        IDS,
        gamma=3,
        max_new_tokens=16,
    )
    caches = [torch.cat(d.cache(i)) for i in range(layers)]
    return logits, ids, stats.accepted, caches


def test_gloo_equals_sequential_two_processes():
    layers = 7  # groups [0], [1, 2], [3, 4], [5], [6]: a narrower group leaves a slot idle
    results = run_layer_parallel(2, _rank_fn, args=(layers,))
    seq = FuzzyDraft(_model(layers, seed=2), group_size=2, backend="sequential")
    ref = _fuzzy_run(seq)
    base = _model(2, seed=1)
    ref_ids, ref_stats = speculative_generate(
        base, FuzzyDraft(_model(layers, seed=2), group_size=2), IDS, gamma=3, max_new_tokens=16
    )
    greedy = base.generate(IDS, max_new_tokens=16, do_sample=False)
    for logits, ids, accepted, caches in results:
        assert_close(logits, ref, rtol=1e-5)
        for i in range(layers):  # every rank holds the full cache (K/V are all-gathered)
            assert_close(caches[i], torch.cat(seq.cache(i)), rtol=1e-5)
        assert torch.equal(ids, ref_ids) and torch.equal(ids, greedy)
        assert accepted == ref_stats.accepted
    # the fuzzy draft really is fuzzy here (the comparison above is not exact-vs-exact)
    exact = _fuzzy_run(FuzzyDraft(_model(layers, seed=2), group_size=1))
    assert (ref - exact).norm() / exact.norm() > 1e-4


def test_gloo_needs_a_process_group():
    with pytest.raises(ValueError, match="backend"):
        FuzzyDraft(_model(4, seed=0), group_size=2, backend="gloo")
    with pytest.raises(ValueError, match="world_size"):
        run_layer_parallel(0, _rank_fn)
