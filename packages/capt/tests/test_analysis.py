"""analysis.prompt_attention: the per-layer masses equal a hand computation from the probabilities."""

from __future__ import annotations

import pytest
import torch
from capt import CapsuleConfig, PromptTuning, get_peft_model
from capt.analysis import prompt_attention


def _batch():
    ids = torch.randint(3, 48, (3, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding in one row
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize(("n", "keys"), [(1, None), (4, None), (4, [0])])
def test_masses_equal_a_hand_computation(n, keys, tiny_llama):
    config = CapsuleConfig() if n == 1 else PromptTuning(n)
    model = get_peft_model(tiny_llama(), config)
    batch = _batch()
    got = prompt_attention(model, batch, n, keys=keys)
    with torch.no_grad():
        att = model(**batch, output_attentions=True).attentions
    assert sorted(got) == [0, 1, 2]
    keys = list(range(n)) if keys is None else keys
    for layer, probs in enumerate(att):
        total, count = 0.0, 0
        for b in range(3):
            for t in range(7):
                if batch["attention_mask"][b, t]:
                    total += float(probs[b, :, n + t, keys].sum(-1).double().mean())
                    count += 1
        assert abs(got[layer][0] - total / count) < 1e-6
        assert 0.0 < got[layer][0] <= 1.0 + 1e-6
        assert got[layer][1] == 0.0  # causal: a leading slot never sees the input


def test_peft_prompt_tuning_model_is_measured_too(tiny_llama):
    peft = pytest.importorskip("peft", reason="peft (the 'peers' extra) is not installed")
    model = peft.get_peft_model(
        tiny_llama(), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3)
    )
    got = prompt_attention(model, _batch(), 3)
    assert len(got) == 3 and all(0.0 < v[0] <= 1.0 + 1e-6 for v in got.values())


def test_bad_input_names_the_argument(tiny_llama):
    from transformers import LlamaConfig, LlamaForCausalLM

    model = get_peft_model(tiny_llama(), CapsuleConfig())
    with pytest.raises(ValueError, match="n_prompt"):
        prompt_attention(model, _batch(), 0)
    with pytest.raises(ValueError, match="n_prompt"):
        prompt_attention(model, _batch(), 2)  # the model has 1 slot
    with pytest.raises(ValueError, match="keys"):
        prompt_attention(model, _batch(), 1, keys=[1])
    with pytest.raises(TypeError, match="batch"):
        prompt_attention(model, torch.zeros(2, 3), 1)
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        attn_implementation="sdpa",
    )
    sdpa = get_peft_model(LlamaForCausalLM(config), CapsuleConfig())
    with pytest.raises(ValueError, match=r"model: .*eager"):
        prompt_attention(sdpa, {"input_ids": torch.tensor([[3, 4]])}, 1)
