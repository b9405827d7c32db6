"""The natural kvpress-style calls: ``with press(model): model(ids)`` / ``model.generate(...)``, and
padding masks refused however they are passed (issue 12)."""

import pytest
import torch
from andpro import AnDProScorer, AttentionScorer, Press, PressCache
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM


def model_and_prompt(length=200, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        intermediate_size=128,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(seed + 1))
    return model, ids


@torch.no_grad()
def test_generate_inside_press_with_full_budget_equals_transformers_greedy():
    model, ids = model_and_prompt()
    ref = model.generate(ids, max_new_tokens=8, do_sample=False)
    press = Press(AnDProScorer(), budget=200)
    with press(model):
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert torch.equal(out, ref)
    assert [s["budget"] for s in press.stats] == [200, 200]


@pytest.mark.parametrize("head_budget", ["uniform", "adaptive"])
@torch.no_grad()
def test_generate_inside_press_decodes_on_48_kept_tokens(head_budget):
    model, ids = model_and_prompt()
    ref = model.generate(ids, max_new_tokens=8, do_sample=False)
    press = Press(AnDProScorer(), budget=48, head_budget=head_budget)
    with press(
        model
    ) as cache:  # the yielded cache is the one generate's empty cache is replaced by
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
        assert cache.get_seq_length() == 200 + 7  # the last generated token is never fed
        # reference: explicit prefill + manual greedy decode on the same cache kind
    assert not torch.equal(out, ref)
    assert out.shape == (1, 208) and torch.equal(out[:, :200], ids)
    for stat in press.stats:  # every layer compressed to exactly 48 per KV head (on average)
        kept = stat["kept"]
        assert int(kept.sum()) == 2 * 48
        if head_budget == "uniform":
            assert kept.eq(48).all()
    for layer in cache.layers:  # then the 7 fed tokens were appended to every head
        assert int(layer.kept_counts().sum()) == 2 * (48 + 7)
    # the same tokens as the explicit `as cache` form with a hand-written greedy loop
    with press(model) as explicit:
        logits = model(ids, cache=explicit).logits[:, -1]
        manual = [ids]
        for t in range(8):
            nxt = logits.argmax(-1, keepdim=True)
            manual.append(nxt)
            if t < 7:
                logits = model(nxt, cache=explicit).logits[:, -1]
    assert torch.equal(out, torch.cat(manual, 1))


@torch.no_grad()
def test_plain_forward_inside_press_compresses_its_own_cache():
    model, ids = model_and_prompt(90)
    press = Press(AttentionScorer(), budget=40, window=8)
    with press(model) as cache:
        out = model(ids)
        assert out.cache is cache and isinstance(out.cache, PressCache)
        assert cache.get_seq_length() == 90 and int(cache.layers[0].kept_counts().sum()) == 80
        again = model(ids)  # a second fresh prefill gets a fresh cache (the yielded one is full)
        assert isinstance(again.cache, PressCache) and again.cache is not cache
        assert int(again.cache.layers[1].kept_counts().sum()) == 80
        # an empty DynamicCache passed explicitly is replaced too, and so is model.model(...)
        out2 = model(ids, cache=DynamicCache(config=model.config))
        assert isinstance(out2.cache, PressCache)
        base = model.model(ids)
        assert isinstance(base.cache, PressCache)
        assert int(base.cache.layers[0].kept_counts().sum()) == 80
        torch.testing.assert_close(out2.logits, out.logits)
        # use_cache=False: full attention, nothing cached
        assert model(ids, use_cache=False).cache is None
    # outside the context the model is untouched
    assert type(model(ids).cache) is DynamicCache


def _padded(ids):
    mask = torch.ones(2, ids.shape[1], dtype=torch.long)
    mask[1, :5] = 0
    return torch.cat([ids, ids]), mask


@pytest.mark.parametrize(
    "call",
    ["kwarg", "positional", "model.model kwarg", "model.model positional", "generate"],
)
@torch.no_grad()
def test_every_padding_mask_is_refused(call):
    model, ids = model_and_prompt(60)
    ids2, mask = _padded(ids)
    calls = {
        "kwarg": lambda: model(ids2, attention_mask=mask),
        "positional": lambda: model(ids2, mask),
        "model.model kwarg": lambda: model.model(ids2, attention_mask=mask),
        "model.model positional": lambda: model.model(ids2, mask),
        "generate": lambda: model.generate(
            ids2, attention_mask=mask, max_new_tokens=2, do_sample=False
        ),
    }
    with Press(AnDProScorer(), budget=44)(model), pytest.raises(ValueError, match="padded"):
        calls[call]()
    assert model.config._attn_implementation == "sdpa"  # restored


@torch.no_grad()
def test_all_ones_mask_and_batches_without_padding_are_accepted():
    model, ids = model_and_prompt(60)
    ids2 = torch.cat([ids, ids.flip(1)])
    press = Press(AnDProScorer(), budget=44)
    with press(model):
        a = model(ids2, torch.ones_like(ids2)).logits
    with press(model):
        b = model(ids2).logits
    torch.testing.assert_close(a, b)
    with press(model), pytest.raises(ValueError, match="4-D mask"):
        model(ids2, attention_mask=torch.ones(2, 1, 60, 60, dtype=torch.bool))
