"""The hooked Llama against ``capsule_forward_reference`` run over the same decoder layers."""

from __future__ import annotations

import copy

import pytest
import torch
from capt import CapsuleConfig, get_peft_model
from capt.reference import capsule_forward_reference

from neurips25_core.testing import assert_close


def _reference_layers(base):
    """Each decoder layer as ``layer(h, mask)``: positions from the mask, causal + padding mask."""

    def wrap(layer):
        def f(h, mask):
            pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
            pe = base.model.rotary_emb(h, position_ids=pos)
            t = h.shape[1]
            allowed = torch.ones(t, t, dtype=torch.bool).tril()[None] & mask.bool()[:, None, :]
            additive = torch.zeros(allowed.shape, dtype=h.dtype)
            additive = additive.masked_fill(~allowed, torch.finfo(h.dtype).min)[:, None]
            return layer(h, attention_mask=additive, position_embeddings=pe, position_ids=pos)

        return f

    return [wrap(layer) for layer in base.model.layers]


def _reference_logits(base, model, ids, attn, inst, source):
    """Logits of ``capsule_forward_reference`` over a float64 copy of ``base``'s decoder layers,
    with the capsules of ``model`` (layers [0, 2], α = 0.7, add)."""
    ref_base = copy.deepcopy(base).double()  # the reference always runs in float64
    h, _ = capsule_forward_reference(
        ref_base.model.embed_tokens(ids),
        inst,
        attn,
        _reference_layers(ref_base),
        model.capsules.double(),
        [0, 2],
        0.7,
        "add",
        source,
        [layer.input_layernorm for layer in ref_base.model.layers],
    )
    return ref_base.lm_head(ref_base.model.norm(h))


@pytest.mark.parametrize("t", [1, 7, 33])
@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize(
    ("dtype", "rtol", "source"),
    [
        (torch.float64, 1e-10, "embedding"),
        (torch.float64, 1e-10, "hidden"),
        (torch.float32, 1e-5, "embedding"),
    ],
)
def test_hooked_llama_matches_reference(t, padding, dtype, rtol, source, tiny_llama, make_masks):
    base = tiny_llama(dtype=dtype)
    cfg = CapsuleConfig(
        layers=[0, 2], instance_source=source, alpha=0.7, init="normal", init_std=0.5
    )
    model = get_peft_model(base, cfg, generator=torch.Generator().manual_seed(t))
    attn, inst = make_masks(2, t, padding, seed=t)
    ids = torch.randint(3, 48, (2, t), generator=torch.Generator().manual_seed(t)) * attn
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, instance_mask=inst).logits
        ref = _reference_logits(base, model, ids, attn, inst, source)
    real = torch.cat([torch.ones(2, 1, dtype=torch.bool), attn.bool()], 1)
    assert_close(logits[real], ref[real], rtol=rtol)


# ---- Qwen2 and Mistral: the same hooks as Llama (their decoder layers take the same arguments)
_VOCAB = 48  # conftest.VOCAB


@pytest.mark.parametrize("kind", ["qwen2", "mistral"])
@pytest.mark.parametrize("padding", ["left", "right"])
def test_hooked_decoder_matches_reference(kind, padding, make_masks, tiny_llama):
    base = tiny_llama(dtype=torch.float64, model_type=kind)
    assert base.config.model_type == kind
    cfg = CapsuleConfig(layers=[0, 2], alpha=0.7, init="normal", init_std=0.5)
    model = get_peft_model(base, cfg, generator=torch.Generator().manual_seed(1))
    attn, inst = make_masks(2, 7, padding, seed=3)
    ids = torch.randint(3, _VOCAB, (2, 7), generator=torch.Generator().manual_seed(2)) * attn
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, instance_mask=inst).logits
        ref = _reference_logits(base, model, ids, attn, inst, "embedding")
    real = torch.cat([torch.ones(2, 1, dtype=torch.bool), attn.bool()], 1)
    assert_close(logits[real], ref[real], rtol=1e-10)


@pytest.mark.parametrize("kind", ["qwen2", "mistral"])
def test_kv_cache_generate_equals_full_recompute(kind, tiny_llama):
    model = get_peft_model(tiny_llama(model_type=kind), CapsuleConfig(init="normal", init_std=0.5))
    ids = torch.randint(3, _VOCAB, (2, 7), generator=torch.Generator().manual_seed(0))
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    seq = ids
    with torch.no_grad():
        for _ in range(8):
            inst = torch.zeros_like(seq)
            inst[:, :7] = 1  # the instance is the prompt, fixed while decoding
            logits = model(input_ids=seq, instance_mask=inst).logits
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
    base_out = model.unload()(input_ids=ids).logits
    assert base_out.shape == (2, 7, _VOCAB)
