"""CaPT on T5 encoder blocks (tiny configs, random weights): the hooks against the float64 reference."""

from __future__ import annotations

import copy

import pytest
import torch
from capt import CapsuleConfig, get_peft_model, instance_semantics
from capt.reference import capsule_forward_reference

from neurips25_core.testing import assert_close


def _reference_blocks(base):
    """Each encoder block as ``block(h, mask)``: block 0's relative bias, keys masked by padding."""
    attention0 = base.encoder.block[0].layer[0].SelfAttention

    def wrap(block):
        def f(h, mask):
            t = h.shape[1]
            bias = attention0.compute_bias(t, t)
            additive = torch.zeros(mask.shape, dtype=h.dtype)
            additive = additive.masked_fill(~mask.bool(), torch.finfo(h.dtype).min)
            return block(h, attention_mask=additive[:, None, None, :], position_bias=bias)[0]

        return f

    return [wrap(block) for block in base.encoder.block]


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
def test_hooked_t5_encoder_matches_reference(t, padding, dtype, rtol, source, tiny_t5, make_masks):
    base = tiny_t5(dtype=dtype)
    cfg = CapsuleConfig(
        layers=[0, 2], instance_source=source, alpha=0.7, init="normal", init_std=0.5
    )
    model = get_peft_model(base, cfg, generator=torch.Generator().manual_seed(t))
    attn, inst = make_masks(2, t, padding, seed=t)
    ids = torch.randint(3, 48, (2, t), generator=torch.Generator().manual_seed(t)) * attn
    dec = torch.randint(3, 48, (2, 4), generator=torch.Generator().manual_seed(t + 1))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=attn, instance_mask=inst, decoder_input_ids=dec)
        ref_base = copy.deepcopy(base).double()  # the reference always runs in float64
        h, _ = capsule_forward_reference(
            ref_base.shared(ids),
            inst,
            attn,
            _reference_blocks(ref_base),
            model.capsules.double(),
            [0, 2],
            0.7,
            "add",
            source,
            [block.layer[0].layer_norm for block in ref_base.encoder.block],
        )
        enc = ref_base.encoder.final_layer_norm(h)
        full = torch.cat([torch.ones(2, 1, dtype=attn.dtype), attn], 1)
        ref_logits = ref_base(
            encoder_outputs=(enc,), attention_mask=full, decoder_input_ids=dec
        ).logits
    real = full.bool()
    assert_close(out.encoder_last_hidden_state[real], enc[real], rtol=rtol)
    assert_close(out.logits, ref_logits, rtol=rtol)


def test_t5_trains_capsules_only_and_writes_each_selected_block(tiny_t5):
    base = tiny_t5()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = get_peft_model(base, CapsuleConfig(layers=[0, 2], alpha=0.5))
    assert model.get_nb_trainable_parameters()[0] == 2 * 1 * 32
    seen = {}
    for ell, block in enumerate(base.encoder.block):  # registered after ours: sees the written slot
        block.register_forward_pre_hook(
            lambda m, a, kw, ell=ell: seen.__setitem__(ell, a[0].detach().clone()),
            with_kwargs=True,
        )
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 48, (3, 9), generator=g)
    labels = torch.randint(3, 48, (3, 2), generator=g)  # decoder targets: never in the instance
    opt = torch.optim.AdamW([model.capsules], lr=1e-2)
    for _ in range(5):
        opt.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
    with torch.no_grad():
        model(input_ids=ids, decoder_input_ids=labels)  # the slots, with the trained capsules
    after = base.state_dict()
    assert all(torch.equal(before[n], after[n]) for n in before)
    s = instance_semantics(base.shared(ids), torch.ones_like(ids))
    for row, ell in enumerate([0, 2]):
        want = model.capsules[row][None] + 0.5 * s[:, None]
        assert_close(seen[ell][:, :1], want.detach(), rtol=1e-6)
    assert not torch.allclose(seen[1][:, :1], seen[0][:, :1])  # block 1 is not selected
    assert model.unload() is base


def test_t5_generate_equals_full_recompute(tiny_t5):
    model = get_peft_model(tiny_t5(), CapsuleConfig(init="normal", init_std=0.5))
    ids = torch.randint(3, 48, (2, 7), generator=torch.Generator().manual_seed(3))
    out = model.generate(ids, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.shape == (2, 7)  # decoder_start + 6 new tokens (decoder ids only, as T5)
    with torch.no_grad():
        for step in range(1, out.shape[1]):
            logits = model(input_ids=ids, decoder_input_ids=out[:, :step]).logits
            assert torch.equal(logits[:, -1].argmax(-1), out[:, step])


def test_t5_encoder_model_and_refusals(tiny_t5):
    base = tiny_t5(encoder_only=True)
    model = get_peft_model(base, CapsuleConfig())
    ids = torch.randint(3, 48, (2, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        hidden = model(input_ids=ids).last_hidden_state
    assert hidden.shape == (2, 6, 32)
    with pytest.raises(ValueError, match="layers"):
        get_peft_model(tiny_t5(), CapsuleConfig(layers=[3]))
    with pytest.raises(ValueError, match="instance_mask"):
        model(input_ids=ids, instance_mask=torch.ones(2, 4, dtype=torch.long))
