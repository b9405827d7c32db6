"""Unit tests of the tensor-level scoring and selection against the float64 loop reference."""

import pytest
import torch
import torch.nn.functional as F
from andpro import reference, scoring
from andpro.scorers import (
    AnDProScorer,
    AttentionScorer,
    KNormScorer,
    RandomScorer,
    ScoringContext,
    SnapKVScorer,
    StreamingLLMScorer,
)
from andpro.select import resolve_budget, select_keep

from neurips25_core.testing import assert_close, randn


def _qkv(b, hq, hkv, w, length, d, seed, dtype=torch.float64):
    return (
        randn(b, hq, w, d, seed=seed, dtype=dtype),
        randn(b, hkv, length, d, seed=seed + 1, dtype=dtype),
        randn(b, hkv, length, d, seed=seed + 2, dtype=dtype),
    )


def _chunk_sum(token_scores, chunks):
    return torch.stack([token_scores[..., c].sum(-1) for c in chunks], dim=-1)


@pytest.mark.parametrize("shape", [(1, 2, 1, 5, 37, 8), (2, 4, 2, 7, 53, 16), (1, 6, 3, 9, 41, 4)])
def test_window_attention_matches_reference(shape):
    b, hq, hkv, w, length, d = shape
    q, k, _ = _qkv(b, hq, hkv, w, length, d, seed=3)
    assert_close(
        scoring.window_attention(q, k), reference.reference_window_attention(q, k), rtol=1e-12
    )
    # float32 path stays close to the float64 reference.
    out32 = scoring.window_attention(q.float(), k.float())
    assert out32.dtype == torch.float32
    assert_close(out32.double(), reference.reference_window_attention(q, k), rtol=1e-5)


def test_window_attention_is_causal_inside_the_window():
    q, k, _ = _qkv(1, 2, 2, 6, 20, 8, seed=0)
    a = scoring.window_attention(q, k)
    for i in range(6):
        assert torch.all(a[..., i, 20 - 6 + i + 1 :] == 0)
        assert_close(a[..., i, :].sum(-1), torch.ones(1, 2, dtype=torch.float64), rtol=1e-12)


@pytest.mark.parametrize("kernel", [1, 3, 7])
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool_matches_torch_and_reference(kernel, mode):
    x = torch.rand(
        2, 3, 4, 29, dtype=torch.float64, generator=torch.Generator().manual_seed(kernel)
    )
    out = scoring.pool(x, kernel, mode)
    if mode == "max":
        expect = F.max_pool1d(x.reshape(-1, 1, 29), kernel, stride=1, padding=kernel // 2).reshape(
            x.shape
        )
    else:
        expect = F.avg_pool1d(x.reshape(-1, 1, 29), kernel, stride=1, padding=kernel // 2).reshape(
            x.shape
        )
    assert torch.equal(out, expect)
    assert torch.allclose(
        out[0, 1, 2], reference.reference_pool(x[0, 1, 2], kernel, mode), rtol=0, atol=1e-15
    )


def test_chunk1_one_query_no_pool_is_brute_force_projection():
    q, k, v = _qkv(1, 1, 1, 1, 23, 6, seed=11)
    a = scoring.window_attention(q, k)  # [1,1,1,L]
    cand = scoring.candidate_mask(23, 4, 1)
    s = scoring.andpro_scores(a, v, cand)[0, 0]
    anchor = sum(a[0, 0, 0, j] * v[0, 0, j] for j in range(23) if cand[j])
    brute = torch.stack([a[0, 0, 0, j] * torch.dot(v[0, 0, j], anchor) for j in range(23)])
    assert_close(s, brute, rtol=1e-12)
    # and the reference's chunk-1 scores agree on the candidates
    ref, chunks = reference.reference_andpro_chunk_scores(
        q, k, v, sink_tokens=4, window=1, chunk_size=1, kernel_size=1
    )
    assert_close(_chunk_sum(s, chunks), ref[0, 0], rtol=1e-12)


@pytest.mark.parametrize(
    ("shape", "sinks", "window", "chunk", "kernel"),
    [
        ((1, 2, 2, 8, 45, 8), 4, 8, 4, 7),
        ((2, 4, 2, 6, 51, 8), 4, 6, 4, 7),
        ((1, 6, 2, 5, 38, 4), 3, 5, 3, 5),
    ],
)
def test_andpro_chunk_scores_match_reference(shape, sinks, window, chunk, kernel):
    b, hq, hkv, w, length, d = shape
    q, k, v = _qkv(b, hq, hkv, w, length, d, seed=5)
    ctx = ScoringContext(q, k, v, sink_tokens=sinks, window=window, pool_kernel=kernel)
    tok = AnDProScorer(gqa_reduce="per_qhead").score(ctx)
    ref, chunks = reference.reference_andpro_chunk_scores(
        q, k, v, sink_tokens=sinks, window=window, chunk_size=chunk, kernel_size=kernel
    )
    assert_close(_chunk_sum(tok, chunks), ref, rtol=1e-12)
    att = AttentionScorer(gqa_reduce="per_qhead").score(ctx)
    ref_att, _ = reference.reference_attention_chunk_scores(
        q, k, sink_tokens=sinks, window=window, chunk_size=chunk, kernel_size=kernel
    )
    assert_close(_chunk_sum(att, chunks), ref_att, rtol=1e-12)


def test_gqa_sum_is_sum_over_query_heads_and_mha_is_unchanged():
    q, k, v = _qkv(2, 6, 2, 5, 40, 8, seed=9)
    ctx = ScoringContext(q, k, v, sink_tokens=4, window=5)
    per_q = AnDProScorer(gqa_reduce="per_qhead").score(ctx)
    summed = AnDProScorer().score(ctx)
    assert summed.shape == (2, 2, 40)
    assert_close(summed, per_q.view(2, 2, 3, 40).sum(2), rtol=1e-12)
    mean = AnDProScorer(gqa_reduce="mean").score(ctx)
    assert_close(mean, per_q.view(2, 2, 3, 40).mean(2), rtol=1e-12)
    # MHA: H_q == H_kv, "sum" is the identity on query heads.
    q2, k2, v2 = _qkv(1, 3, 3, 5, 40, 8, seed=10)
    ctx2 = ScoringContext(q2, k2, v2, sink_tokens=4, window=5)
    assert torch.equal(AnDProScorer().score(ctx2), AnDProScorer(gqa_reduce="per_qhead").score(ctx2))


def test_high_attention_token_against_the_output_is_evicted():
    # One query, 12 tokens: token 6 has the highest attention but its value opposes the anchor.
    g = torch.Generator().manual_seed(0)
    length, d = 12, 4
    a = torch.full((length,), 0.05, dtype=torch.float64)
    a[6] = 0.3
    a = (a / a.sum()).view(1, 1, 1, length)
    v = (
        torch.rand(1, 1, length, d, generator=g, dtype=torch.float64) + 0.5
    )  # all point to (+,+,+,+)
    v[0, 0, 6] = -0.2 * torch.ones(d, dtype=torch.float64)  # opposes; a_6 v_6 is small vs the rest
    cand = scoring.candidate_mask(length, 1, 1)
    s_pro = scoring.andpro_scores(a, v, cand)[0, 0]
    s_att = scoring.attn_scores(a)[0, 0]
    keep_pro = select_keep(s_pro.view(1, 1, -1), 8, sink_tokens=1, window=1, chunk_size=1)[0, 0]
    keep_att = select_keep(s_att.view(1, 1, -1), 8, sink_tokens=1, window=1, chunk_size=1)[0, 0]
    assert s_pro[6] < 0 and s_pro[cand].argmin() == torch.nonzero(cand)[:, 0].tolist().index(6)
    assert not keep_pro[6] and keep_att[6]


def test_fig1_three_tokens_projection_beats_attention_and_matches_oracle():
    # Fig. 1-style: budget 2 of 3 tokens, one query. Token 2 is well attended but opposes the output.
    a = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64).view(1, 1, 1, 3)
    v = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0]], dtype=torch.float64).view(1, 1, 3, 2)
    cand = torch.ones(3, dtype=torch.bool)
    s_pro = scoring.andpro_scores(a, v, cand)[0, 0]
    s_att = scoring.attn_scores(a)[0, 0]
    keep_pro = set(s_pro.topk(2).indices.tolist())
    keep_att = set(s_att.topk(2).indices.tolist())
    assert keep_pro == {0, 2} and keep_att == {0, 1}

    def err(kept):
        lost = [j for j in range(3) if j not in kept]
        return float(((a[0, 0, 0, lost, None] * v[0, 0, lost]).sum(0) ** 2).sum())

    assert err(keep_pro) < err(keep_att)
    oracle, oracle_err = reference.reference_oracle_keep(a[0, 0], v[0, 0], [0, 1, 2], 2)
    assert set(oracle) == keep_pro and oracle_err == pytest.approx(err(keep_pro), rel=1e-12)


@pytest.mark.parametrize("length", [37, 40, 61])
@pytest.mark.parametrize("budget_off", [0, 1, 3, 9])
@pytest.mark.parametrize("mode", ["adaptive", "uniform"])
def test_select_exact_budget_and_protected_tokens(length, budget_off, mode):
    sinks, window, chunk, h = 4, 8, 4, 3
    budget = min(length, sinks + window + 5 + budget_off)
    scores = randn(2, h, length, seed=length + budget_off, dtype=torch.float64)
    keep = select_keep(
        scores, budget, sink_tokens=sinks, window=window, chunk_size=chunk, head_budget=mode
    )
    assert keep[..., :sinks].all() and keep[..., length - window :].all()
    if mode == "adaptive":
        assert keep.sum((1, 2)).tolist() == [h * budget] * 2
    else:
        assert (keep.sum(-1) == budget).all()
    ref = reference.reference_select(
        scores, budget, sink_tokens=sinks, window=window, chunk_size=chunk, head_budget=mode
    )
    assert torch.equal(keep, ref)


def test_adaptive_gives_unequal_head_budgets_when_one_head_dominates():
    scores = randn(1, 4, 64, seed=1, dtype=torch.float64).abs()
    scores[0, 2] += 100.0
    keep = select_keep(scores, 24, sink_tokens=4, window=4, chunk_size=4)
    counts = keep.sum(-1)[0]
    assert counts.sum() == 4 * 24
    assert (
        counts[2] == 64 and (counts[[0, 1, 3]] < 24).all()
    )  # no floor: others may keep only sinks+window


def test_key_only_scorers():
    q, k, v = _qkv(1, 4, 2, 4, 30, 8, seed=2)
    ctx = ScoringContext(q, k, v, sink_tokens=2, window=4)
    s = StreamingLLMScorer().score(ctx)
    keep = select_keep(s, 12, sink_tokens=2, window=4, chunk_size=1)
    assert keep[0, :, 20:].all() and not keep[0, :, 2:20].any()
    kn = KNormScorer().score(ctx)
    assert torch.equal(kn, -k.float().norm(dim=-1))
    assert KNormScorer(gqa_reduce="per_qhead").score(ctx).shape == (1, 4, 30)
    r1, r2 = RandomScorer(seed=3).score(ctx), RandomScorer(seed=3).score(ctx)
    assert torch.equal(r1, r2) and not torch.equal(r1, RandomScorer(seed=4).score(ctx))


def test_snapkv_matches_direct_formula():
    q, k, v = _qkv(1, 4, 2, 6, 33, 8, seed=4)
    ctx = ScoringContext(q, k, v, sink_tokens=4, window=6, pool_kernel=5)
    s = SnapKVScorer().score(ctx)
    a = reference.reference_window_attention(q, k)
    mean_q = a[..., : 33 - 6].mean(2)  # [1, 4, 27]
    pooled = torch.stack(
        [torch.stack([reference.reference_pool(mean_q[0, h], 5, "avg") for h in range(4)])]
    )
    expect = pooled.view(1, 2, 2, 27).mean(2)
    assert_close(s[..., :27], expect, rtol=1e-12)
    assert (s[..., 27:] > s[..., :27].amax(-1, keepdim=True)).all()


def test_scoring_errors():
    q, k, _v = _qkv(1, 4, 2, 4, 30, 8, seed=2)
    with pytest.raises(ValueError, match="kernel_size"):
        scoring.pool(torch.zeros(3, 10), 4)
    with pytest.raises(ValueError, match="mode"):
        scoring.pool(torch.zeros(3, 10), 3, "median")
    with pytest.raises(ValueError, match="H_kv=3 must divide"):
        scoring.window_attention(q, randn(1, 3, 30, 8))
    with pytest.raises(ValueError, match="exceeds the key length"):
        scoring.window_attention(randn(1, 4, 40, 8), k)
    with pytest.raises(TypeError, match="queries"):
        scoring.window_attention(q.long(), k)
    with pytest.raises(ValueError, match="gqa_reduce"):
        AnDProScorer(gqa_reduce="max")
    with pytest.raises(ValueError, match="pooling"):
        AnDProScorer(pooling="median")
    with pytest.raises(ValueError, match="head_budget"):
        select_keep(torch.zeros(1, 1, 30), 20, window=4, head_budget="fixed")
    with pytest.raises(ValueError, match="budget"):
        select_keep(torch.zeros(1, 1, 30), 5, sink_tokens=4, window=4)
    with pytest.raises(ValueError, match="budget"):
        select_keep(torch.zeros(1, 1, 30), 31, sink_tokens=4, window=4)
    with pytest.raises(ValueError, match="chunk_size"):
        select_keep(torch.zeros(1, 1, 30), 20, window=4, chunk_size=0)
    with pytest.raises(ValueError, match="larger than the context"):
        resolve_budget(40, 30, 4, 8)
    with pytest.raises(ValueError, match="below sink_tokens"):
        resolve_budget(0.1, 100, 4, 8)
    assert resolve_budget(0.5, 101, 4, 8) == 50
