"""Integration: the press on tiny Llama / Mistral / Qwen3 models built from configs (GQA, no downloads)."""

import andpro
import pytest
import torch
from andpro import AnDProScorer, AttentionScorer, KNormScorer, Press, SnapKVScorer
from transformers import (
    AttentionInterface,
    DynamicCache,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from neurips25_core.testing import assert_close

COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    intermediate_size=128,
    max_position_embeddings=512,
)


def make_model(kind="llama", impl="eager", seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**COMMON, attn_implementation=impl))
    elif kind == "mistral":
        model = MistralForCausalLM(
            MistralConfig(**COMMON, sliding_window=None, attn_implementation=impl)
        )
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**COMMON, attn_implementation=impl))
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**COMMON, head_dim=16, attn_implementation=impl))
    else:
        raise ValueError(kind)
    return model.eval().to(dtype)


def prompt(length=90, batch=1, seed=1):
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


def masked_reference_logits(model, ids, keep_masks, prompt_len):
    """Full forward over ids with a manual eager attention: queries at positions >= prompt_len see
    only the kept prompt tokens of their KV head (per head), plus every later token; prompt queries
    see their full causal prefix."""
    name = "andpro_test_masked_reference"

    def attn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        b, hq, t, _d = query.shape
        keep = keep_masks[module.layer_idx]  # [B, H_k, prompt_len]
        hk = keep.shape[1]
        groups_k = hq // key.shape[1]
        k = key.repeat_interleave(groups_k, 1).double()
        v = value.repeat_interleave(groups_k, 1).double()
        keep_q = keep.repeat_interleave(hq // hk, 1)  # [B, H_q, L]
        pos = torch.arange(t)
        allowed = (pos[None, :] <= pos[:, None]).expand(b, hq, t, t).clone()
        later = pos >= prompt_len
        allowed[:, :, later, :prompt_len] &= keep_q[:, :, None, :]
        logits = torch.matmul(query.double(), k.transpose(2, 3)) * scaling
        logits = logits.masked_fill(~allowed, float("-inf"))
        out = torch.matmul(torch.softmax(logits, -1), v).to(query.dtype)
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(name, attn)
    old = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        with torch.no_grad():
            return model(ids, use_cache=False).logits
    finally:
        model.config._attn_implementation = old
        AttentionInterface._global_mapping.pop(name, None)


def press_decode(model, press, ids, steps):
    """Prefill under the press and decode `steps` greedy tokens; return (all ids, decode logits, keep masks)."""
    logits = []
    with torch.no_grad(), press(model) as cache:
        out = model(ids, cache=cache).logits[:, -1]
        keeps = [layer.keep_mask(ids.shape[1]) for layer in cache.layers]
        seq = ids
        for _ in range(steps):
            nxt = out.argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
            out = model(nxt, cache=cache).logits[:, -1]
            logits.append(out)
    return seq, torch.stack(logits, 1), keeps


def test_full_budget_is_identical_to_no_press():
    model = make_model()
    ids = prompt(70)
    press = Press(AnDProScorer(), budget=70, window=16)
    seq, dec, _ = press_decode(model, press, ids, 4)
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        full = model(ids, cache=cache).logits[:, -1]
        ref = []
        for t in range(4):
            out = model(seq[:, 70 + t : 71 + t], cache=cache).logits[:, -1]
            ref.append(out)
        first = model(ids).logits
    assert torch.equal(full.argmax(-1), seq[:, 70])
    assert_close(dec, torch.stack(ref, 1), rtol=1e-6)
    with torch.no_grad(), press(model) as cache:
        assert torch.equal(model(ids, cache=cache).logits, first)
    assert all(s["kept"].eq(70).all() for s in press.stats)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize(
    "scorer", [AnDProScorer(), SnapKVScorer(), AnDProScorer(gqa_reduce="per_qhead")]
)
def test_decoding_matches_masked_full_attention(kind, scorer):
    model = make_model(kind)
    ids = prompt(83, batch=2)
    budget = 40
    press = Press(
        scorer, budget=budget, window=12, chunk_size=4 if isinstance(scorer, AnDProScorer) else 1
    )
    seq, dec, keeps = press_decode(model, press, ids, 5)
    heads = 4 if scorer.gqa_reduce == "per_qhead" else 2
    for s, keep in zip(press.stats, keeps):
        assert keep.shape == (2, heads, 83)
        assert (
            keep.sum((1, 2)).tolist() == [heads * budget] * 2
        )  # exactly the budget per head on average
        assert torch.equal(keep.sum(-1), s["kept"])
        assert keep[..., :4].all() and keep[..., -12:].all()
    ref = masked_reference_logits(model, seq, keeps, 83)[:, 83:]
    assert_close(dec, ref, rtol=1e-5)


def test_float64_decoding_matches_masked_reference_tightly():
    model = make_model("llama", "eager", dtype=torch.float64)
    ids = prompt(75)
    press = Press(AnDProScorer(), budget=30, window=8)
    seq, dec, keeps = press_decode(model, press, ids, 4)
    ref = masked_reference_logits(model, seq, keeps, 75)[:, 75:]
    assert_close(dec, ref, rtol=1e-10)


def test_mistral_sliding_window_is_applied_by_the_press_mask():
    torch.manual_seed(0)
    model = MistralForCausalLM(
        MistralConfig(**COMMON, sliding_window=16, attn_implementation="eager")
    ).eval()
    ids = prompt(60)
    with torch.no_grad():
        ref = model(ids).logits
        with Press(AnDProScorer(), budget=60, window=8)(model) as cache:
            out = model(ids, cache=cache).logits
    assert_close(out, ref, rtol=1e-6)


def test_bfloat16_model_runs_with_exact_budgets():
    model = make_model("llama", "sdpa", dtype=torch.bfloat16)
    ids = prompt(70)
    press = Press(AnDProScorer(), budget=30, window=8)
    _seq, dec, keeps = press_decode(model, press, ids, 3)
    assert dec.dtype == torch.bfloat16 and torch.isfinite(dec.float()).all()
    assert all(int(k.sum()) == 2 * 30 for k in keeps)


def test_cache_reports_logical_length_and_memory():
    model = make_model()
    ids = prompt(64)
    with torch.no_grad(), Press(AnDProScorer(), budget=24, window=8)(model) as cache:
        model(ids, cache=cache)
        assert cache.get_seq_length() == 64
        mem = cache.memory()
        assert mem["kept_slots"] == 2 * 2 * 24  # layers x KV heads x budget
        assert mem["physical_slots"] >= mem["kept_slots"]
        model(ids[:, :1], cache=cache)
        assert cache.get_seq_length() == 65
        assert cache.layers[0].positions[..., -1].eq(64).all()
        with pytest.raises(ValueError, match="padded"):
            model(ids[:, :2], cache=cache, attention_mask=torch.tensor([[0] * 65 + [1, 1]]))


def test_eager_and_sdpa_agree():
    ids = prompt(77)
    outs = []
    for impl in ("eager", "sdpa"):
        model = make_model("llama", impl)
        press = Press(AnDProScorer(), budget=0.5, window=8, head_budget="uniform")
        outs.append(press_decode(model, press, ids, 4)[1])
    assert_close(outs[1], outs[0], rtol=1e-5)


def test_generate_matches_transformers_generate_without_eviction():
    model = make_model("llama", "sdpa")
    ids = prompt(50, batch=2)
    ours = andpro.generate(model, ids, Press(KNormScorer(), budget=50, window=8), max_new_tokens=8)
    with torch.no_grad():
        model.generation_config.eos_token_id = (
            None  # the config's default EOS (2) would stop or be suppressed
        )
        theirs = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=0,
        )
    assert torch.equal(ours, theirs)


def test_generate_after_eviction_equals_manual_decode():
    model = make_model("qwen3")
    ids = prompt(60)
    press = Press(AttentionScorer(), budget=30, window=8)
    seq = andpro.generate(model, ids, press, max_new_tokens=6)
    seq2, _, _ = press_decode(model, press, ids, 6)
    assert torch.equal(seq, seq2)
    assert seq.shape == (1, 66)


def test_appended_question_after_compression_matches_masked_reference():
    # Compress a context, then feed a multi-token question in one forward (question-agnostic use).
    model = make_model("llama")
    ctx_ids, question = prompt(64), prompt(7, seed=5)
    press = Press(AnDProScorer(), budget=32, window=8)
    with torch.no_grad(), press(model) as cache:
        model(ctx_ids, cache=cache)
        keeps = [layer.keep_mask(64) for layer in cache.layers]
        out = model(question, cache=cache).logits
        assert cache.get_seq_length() == 71
    ref = masked_reference_logits(model, torch.cat([ctx_ids, question], 1), keeps, 64)[:, 64:]
    assert_close(out, ref, rtol=1e-5)


def test_context_exit_restores_model_even_on_error():
    model = make_model("llama", "sdpa")
    attn0 = model.model.layers[0].self_attn
    press = Press(AnDProScorer(), budget=20, window=8)

    def fail_inside():
        with press(model):
            assert model.config._attn_implementation == "andpro"
            assert len(attn0._forward_hooks) == 1 and len(attn0._forward_pre_hooks) == 1
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert model.config._attn_implementation == "sdpa"
    assert len(attn0._forward_hooks) == 0 and len(attn0._forward_pre_hooks) == 0
    assert "andpro" not in AttentionInterface._global_mapping
    with press(model) as cache, torch.no_grad():
        model(prompt(40), cache=cache)
    with pytest.raises(RuntimeError, match="only be used inside its press"):
        model(prompt(1), cache=cache)


def _run(press, model, ids=None, foreign=False):
    if foreign:  # a foreign cache that already holds tokens cannot be compressed
        foreign = DynamicCache(config=model.config)
        with torch.no_grad():
            model(ids[:, :3], cache=foreign)
    with torch.no_grad(), press(model) as cache:
        if ids is not None:
            model(ids, cache=foreign or cache)


def test_bad_input():
    scorer = AnDProScorer()
    with pytest.raises(TypeError, match="scorer"):
        Press("andpro", budget=64)
    with pytest.raises(ValueError, match="below sink_tokens"):
        Press(scorer, budget=30, window=32, sink_tokens=4)
    with pytest.raises(ValueError, match="window"):
        Press(scorer, budget=64, window=0)
    with pytest.raises(ValueError, match="chunk_size"):
        Press(scorer, budget=64, chunk_size=0)
    with pytest.raises(ValueError, match="pool_kernel"):
        Press(scorer, budget=64, pool_kernel=6)
    with pytest.raises(ValueError, match="head_budget"):
        Press(scorer, budget=64, head_budget="floor")
    with pytest.raises(ValueError, match="budget"):
        Press(scorer, budget=1.5)
    with pytest.raises(TypeError, match="budget"):
        Press(scorer, budget="64")
    model = make_model()
    # budget larger than the context: raised at prefill, and the model is restored afterwards
    with pytest.raises(ValueError, match="larger than the context"):
        _run(Press(scorer, budget=64, window=8), model, prompt(40))
    assert model.config._attn_implementation == "eager"
    with pytest.raises(TypeError, match="DynamicCache holding"):
        _run(Press(scorer, budget=20, window=8), model, prompt(40), foreign=True)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match="unsupported model type"):
        _run(Press(scorer, budget=20, window=8), gpt2)
    noncausal = make_model()
    noncausal.config.is_causal = False
    with pytest.raises(ValueError, match="not causal"):
        _run(Press(scorer, budget=20, window=8), noncausal)
    with (
        pytest.raises(ValueError, match="already active"),
        Press(scorer, budget=20, window=8)(model),
    ):
        _run(Press(scorer, budget=20, window=8), model)
    with pytest.raises(ValueError, match="max_new_tokens"):
        andpro.generate(model, prompt(40), Press(scorer, budget=20, window=8), -1)
