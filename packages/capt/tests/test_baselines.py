"""The baselines on the same hooks: PT(n) = peft's PT, deep PT = CaPT without s, Finding II's token."""

from __future__ import annotations

import pytest
import torch
from capt import (
    CapsuleConfig,
    DeepPromptTuning,
    InstanceToken,
    PromptTuning,
    get_peft_model,
    instance_semantics,
)

from neurips25_core.testing import assert_close


def _ids(seed=0, b=3, t=9):
    return torch.randint(3, 48, (b, t), generator=torch.Generator().manual_seed(seed))


def _manual(base, slots, ids):
    """The base model on ``[slots; embeddings]`` at positions 0..k+T-1 (what every arm should be)."""
    embeds = base.get_input_embeddings()(ids)
    inputs = torch.cat([slots.to(embeds.dtype).expand(ids.shape[0], -1, -1), embeds], 1)
    with torch.no_grad():
        return base(inputs_embeds=inputs).logits


@pytest.mark.parametrize("n", [1, 5])
def test_prompt_tuning_equals_peft_prompt_tuning(n, tiny_llama):
    peft = pytest.importorskip("peft", reason="peft (the 'peers' extra) is not installed")
    ours = get_peft_model(tiny_llama(), PromptTuning(n), generator=torch.Generator().manual_seed(0))
    assert ours.get_nb_trainable_parameters()[0] == n * 32
    theirs = peft.get_peft_model(
        tiny_llama(),
        peft.PromptTuningConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=n, prompt_tuning_init="SAMPLE_VOCAB"
        ),
    )
    with torch.no_grad():
        theirs.prompt_encoder["default"].embedding.weight.copy_(ours.capsules[0])
    ids = _ids()
    labels = ids.clone()
    labels[:, :5] = -100
    with torch.no_grad():
        a = ours(input_ids=ids, labels=labels)
        b = theirs(input_ids=ids, labels=labels)
    assert_close(a.logits, b.logits, rtol=1e-6, name="our PT vs peft PT (same prompts)")
    assert_close(a.loss, b.loss, rtol=1e-6, name="loss")


def test_prompt_tuning_vocab_init_is_token_embeddings(tiny_llama):
    base = tiny_llama()
    model = get_peft_model(base, PromptTuning(4), generator=torch.Generator().manual_seed(1))
    table = base.get_input_embeddings().weight
    for row in model.capsules[0]:
        assert bool((table == row).all(-1).any())


def test_deep_prompt_tuning_is_capt_without_the_instance(tiny_llama):
    """``instance_source="none"``, k = n is DeepPromptTuning(n); α = 0 CaPT gives the same logits."""
    assert DeepPromptTuning(3) == CapsuleConfig(
        instance_source="none", capsule_length=3, init="normal"
    )
    deep = get_peft_model(tiny_llama(), DeepPromptTuning(3))
    capt = get_peft_model(tiny_llama(), CapsuleConfig(capsule_length=3, alpha=0.0))
    assert deep.get_nb_trainable_parameters()[0] == 3 * 3 * 32
    with torch.no_grad():
        capt.capsules.copy_(deep.capsules)
        ids = _ids(1)
        assert torch.equal(deep(input_ids=ids).logits, capt(input_ids=ids).logits)


def test_instance_token_alone_is_the_mean_embedding(tiny_llama):
    base = tiny_llama()
    model = InstanceToken(alpha=0.5).apply(base)
    assert model.get_nb_trainable_parameters()[0] == 0 and not model.training
    ids = _ids(2)
    s = instance_semantics(base.get_input_embeddings()(ids), torch.ones_like(ids))
    with torch.no_grad():
        got = model(input_ids=ids).logits
    assert_close(got, _manual(base, 0.5 * s[:, None], ids), rtol=1e-6, name="[α s; x]")


def test_instance_token_goes_in_front_of_trained_prompts(tiny_llama):
    """Finding II: ``[α s; p_1..p_n; x]`` with the trained prompts copied, nothing trainable."""
    base = tiny_llama()
    pt = get_peft_model(base, PromptTuning(4, init="normal"))
    with torch.no_grad():
        pt.capsules.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    prompts = pt.capsules[0].detach().clone()
    model = InstanceToken().apply(pt)
    assert model.peft_config.fusion == "prepend" and model.get_nb_trainable_parameters()[0] == 0
    assert len(base.model.layers[0]._forward_pre_hooks) == 1  # pt's hook is gone
    ids = _ids(3)
    s = instance_semantics(base.get_input_embeddings()(ids), torch.ones_like(ids))
    slots = torch.cat([s[:, None], prompts[None].expand(3, -1, -1)], 1)
    with torch.no_grad():
        got = model(input_ids=ids).logits
    assert got.shape[1] == 5 + 9
    assert_close(got, _manual(base, slots, ids), rtol=1e-6, name="[s; p; x]")


def test_bad_input_names_the_argument(tiny_llama):
    for bad, err in ((0, ValueError), (-2, ValueError), ("3", TypeError), (True, TypeError)):
        with pytest.raises(err, match="n:"):
            PromptTuning(bad)
        with pytest.raises(err, match="n:"):
            DeepPromptTuning(bad)
    with pytest.raises(ValueError, match="alpha"):
        InstanceToken(alpha=float("nan"))
    with pytest.raises(TypeError, match="model:"):
        InstanceToken().apply("a model")
    deep = get_peft_model(tiny_llama(), DeepPromptTuning(2))
    with pytest.raises(ValueError, match="model:"):
        InstanceToken().apply(deep)
    assert deep.capsules.requires_grad  # refused before anything changed
