"""train_lope: two stages on a tiny config-built Llama, with the stage invariants checked."""

import lope
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from neurips25_core.models import train


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=24,
    )
    base = LlamaForCausalLM(config)
    return lope.get_peft_model(base, lope.LoPEConfig(r=2, lora_dropout=0.0))


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    pattern = torch.arange(17) % 7 + 3

    def batch(step):
        x = pattern.repeat(4, 1)
        if seed:  # the "noisy" stream: random tokens
            x = torch.randint(0, 32, (4, 17), generator=g)
        return x[:, :-1], x[:, 1:]

    return batch


def test_two_stages_keep_their_invariants_and_end_in_inference():
    model = _model()
    result = lope.train_lope(model, _data(1), _data(0), steps=12, lr=1e-2, noise=lope.HyNoise())
    layers = list(model.adapted.values())
    for layer in layers:
        assert layer.mode == "inference"
        assert layer.lora_B[3].abs().sum() > 0, "B_D trained in Stage I"
        assert layer.lora_B[:3].abs().sum() > 0, "the normal experts trained in Stage II"
    assert result.delta_A["stage1"] > 0 and result.delta_A["stage2"] > 0
    assert result.stage2.losses[-1] < result.stage2.losses[0]
    assert not any(p.requires_grad for p in model.parameters())


def test_stage2_leaves_the_poisoning_expert_untouched():
    model = _model()
    lope.train_lope(model, _data(1), _data(0), steps=3, lr=1e-2)
    frozen = [layer.lora_B[3].clone() for layer in model.adapted.values()]
    model.set_stage("stage2")
    train(model, _data(0), steps=5, lr=1e-2, weight_decay=0.0, progress=False)
    for layer, b in zip(model.adapted.values(), frozen):
        assert torch.equal(layer.lora_B[3], b)


def test_bad_arguments():
    with pytest.raises(TypeError, match="model"):
        lope.train_lope(torch.nn.Linear(2, 2), _data(1), _data(0), steps=1)
    with pytest.raises(ValueError, match="steps"):
        lope.train_lope(_model(), _data(1), _data(0), steps=0)
