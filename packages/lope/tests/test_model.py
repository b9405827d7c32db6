"""The layer and the peft-style adapter on a tiny transformers Llama built from a config."""

import copy

import lope
import pytest
import torch
from lope import ops
from lope.model import ADAPTER_WEIGHTS_NAME
from safetensors.torch import load_file
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from neurips25_core.testing import assert_close, randn


def _base(seed=0, layers=2):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=24,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=36,
    )
    return LlamaForCausalLM(config).eval()


IDS = torch.tensor([[1, 5, 7, 9, 3, 2, 11], [4, 4, 8, 1, 0, 6, 39]])


def _config(**kwargs):
    return lope.LoPEConfig(r=3, lora_dropout=0.0, **kwargs)


def _randomise_B(model, seed=1):
    with torch.no_grad():
        for i, layer in enumerate(model.adapted.values()):
            layer.lora_B.copy_(randn(*layer.lora_B.shape, seed=seed + i) * 0.05)


def test_fresh_adapter_leaves_logits_bitwise_equal():
    base = _base()
    expected = base(input_ids=IDS).logits
    model = lope.get_peft_model(copy.deepcopy(base), _config())
    assert len(model.adapted) == 6
    for stage in ops.MODES:
        model.set_stage(stage)
        assert torch.equal(model(input_ids=IDS).logits, expected), stage


def test_only_adapter_parameters_train():
    model = lope.get_peft_model(_base(), _config())
    adapter_ids = {id(p) for p in model.adapter_state_dict().values()}
    for name, p in model.named_parameters():
        if id(p) not in adapter_ids:
            assert not p.requires_grad, name
    params = model.set_stage("all")
    assert {id(p) for p in params} == adapter_ids


def _grads(model, stage):
    model.zero_grad(set_to_none=True)
    model.set_stage(stage)
    model(input_ids=IDS, labels=IDS).loss.backward()
    return list(model.adapted.values())


def test_stage1_trains_only_A_and_the_poisoning_expert():
    model = lope.get_peft_model(_base(), _config())
    for layer in _grads(model, "stage1"):  # every B is zero: A's gradient is zero, as in LoRA
        assert layer.lora_A.grad is not None and torch.all(layer.lora_A.grad == 0)
    with torch.no_grad():  # after a step B_D is non-zero; the normal experts are still zero
        for i, layer in enumerate(model.adapted.values()):
            layer.lora_B[3].copy_(randn(layer.lora_B.shape[1], 3, seed=i) * 0.05)
    for layer in _grads(model, "stage1"):
        assert layer.lora_A.grad.abs().sum() > 0
        assert layer.router.grad is None
        assert torch.all(layer.lora_B.grad[:3] == 0)
        assert layer.lora_B.grad[3].abs().sum() > 0
        assert not layer.base_layer.weight.requires_grad


def test_stage2_freezes_the_poisoning_expert_which_still_moves_the_output():
    model = lope.get_peft_model(_base(), _config())
    _randomise_B(model)
    for layer in _grads(model, "stage2"):
        assert torch.all(layer.lora_B.grad[3] == 0)
        assert layer.lora_B.grad[:3].abs().sum() > 0
        assert layer.router.grad.abs().sum() > 0
        assert layer.lora_A.grad.abs().sum() > 0
    before = model(input_ids=IDS).logits
    with torch.no_grad():
        next(iter(model.adapted.values())).lora_B[3].add_(0.5)
    assert (model(input_ids=IDS).logits - before).abs().max() > 1e-4


def test_layer_inference_equals_the_reference_adapter():
    torch.manual_seed(3)
    base = nn.Linear(11, 7)
    layer = lope.AsymmetricLoRALinear(base, rank=3, num_experts=5, poison=(1, 4), compensation_k=2)
    with torch.no_grad():
        layer.lora_B.copy_(randn(5, 7, 3, seed=4))
    x = randn(2, 6, 11, seed=5)
    for mode in ("inference", "all", "stage2"):
        layer.set_mode(mode)
        ref = (
            base(x.reshape(-1, 11)).double()
            + ops.adapter(
                x.reshape(-1, 11),
                layer.lora_A,
                layer.lora_B,
                layer.router,
                layer.scaling,
                poison=(1, 4),
                mode=mode,
                k=2,
                backend="reference",
            ).double()
        )
        assert_close(layer(x).reshape(-1, 7), ref, rtol=1e-6)


def test_save_load_keeps_only_adapter_tensors_and_logits(tmp_path):
    model = lope.get_peft_model(_base(), _config())
    _randomise_B(model)
    model.set_stage("inference")
    expected = model(input_ids=IDS).logits
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / ADAPTER_WEIGHTS_NAME)
    assert set(saved) == set(model.adapter_state_dict())
    assert all(k.endswith((".lora_A", ".lora_B", ".router")) for k in saved)
    loaded = lope.LoPEModel.from_pretrained(_base(), tmp_path)
    assert loaded.peft_config == model.peft_config
    assert torch.equal(loaded(input_ids=IDS).logits, expected)
    assert not any(p.requires_grad for p in loaded.parameters())


def test_load_refuses_a_mismatched_checkpoint(tmp_path):
    lope.get_peft_model(_base(), _config()).save_pretrained(tmp_path)
    other = _base(layers=1)
    reference = other(input_ids=IDS).logits
    with pytest.raises(ValueError, match="model_id"):
        lope.LoPEModel.from_pretrained(other, tmp_path)
    assert all(isinstance(m, nn.Linear) for n, m in other.named_modules() if n.endswith("up_proj"))
    assert torch.equal(other(input_ids=IDS).logits, reference)
    narrow = tmp_path / "narrow"
    lope.get_peft_model(_base(), _config()).save_pretrained(narrow)
    cfg = lope.LoPEConfig.from_pretrained(narrow)
    lope.LoPEConfig(**{**cfg.to_dict(), "r": 2, "poison_experts": (3,)}).save_pretrained(narrow)
    with pytest.raises(ValueError, match="shape"):
        lope.LoPEModel.from_pretrained(_base(), narrow)


def test_unload_restores_the_base_and_merge_is_refused():
    base = _base()
    originals = {n: m for n, m in base.named_modules() if n.endswith("down_proj")}
    model = lope.get_peft_model(base, _config())
    with pytest.raises(NotImplementedError, match="merge"):
        model.merge_and_unload()
    restored = model.unload()
    assert {n: m for n, m in restored.named_modules() if n.endswith("down_proj")} == originals


def test_hydralora_config_has_no_poisoning_expert(tmp_path):
    model = lope.get_peft_model(_base(), lope.HydraLoRAConfig(r=2, lora_dropout=0.0))
    assert model.set_stage("all")
    with pytest.raises(ValueError, match="mode"):
        model.set_stage("stage1")
    model.save_pretrained(tmp_path)
    assert isinstance(lope.LoPEConfig.from_pretrained(tmp_path), lope.HydraLoRAConfig)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"r": 0}, ValueError, "r"),
        ({"num_experts": 1}, ValueError, "num_experts"),
        ({"poison_experts": (4,)}, ValueError, "poison_experts"),
        ({"compensation_k": 4}, ValueError, "compensation_k"),
        ({"compensation_beta": -1.0}, ValueError, "compensation_beta"),
        ({"router_input": "h"}, ValueError, "router_input"),
        ({"target_modules": 3}, TypeError, "target_modules"),
        ({"lora_dropout": 1.0}, ValueError, "lora_dropout"),
    ],
)
def test_config_rejects_bad_values(kwargs, error, name):
    with pytest.raises(error, match=name):
        lope.LoPEConfig(**kwargs)


def test_target_modules_matching_nothing_is_refused():
    base = _base()
    with pytest.raises(ValueError, match="target_modules"):
        lope.get_peft_model(base, _config(target_modules=["q_norm_missing"]))
    assert all(not isinstance(m, lope.AsymmetricLoRALinear) for m in base.modules())


def test_layer_rejects_bad_arguments():
    with pytest.raises(TypeError, match="base"):
        lope.AsymmetricLoRALinear(nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="rank"):
        lope.AsymmetricLoRALinear(nn.Linear(4, 4), rank=0)
    with pytest.raises(ValueError, match="num_experts"):
        lope.AsymmetricLoRALinear(nn.Linear(4, 4), num_experts=1, poison=(0,))
    with pytest.raises(ValueError, match="mode"):
        lope.AsymmetricLoRALinear(nn.Linear(4, 4)).set_mode("train")


def test_one_expert_without_poison_equals_peft_lora():
    peft = pytest.importorskip("peft", reason="peft (the `peers` extra) is not installed")
    base = _base()
    config = dict(r=3, lora_alpha=32, lora_dropout=0.0, target_modules=["up_proj", "down_proj"])
    theirs = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(**config))
    ours = lope.get_peft_model(copy.deepcopy(base), lope.HydraLoRAConfig(num_experts=1, **config))
    with torch.no_grad():
        for name, module in theirs.base_model.model.named_modules():
            if name.endswith(("up_proj", "down_proj")):
                layer = ours.adapted[name]
                module.lora_B["default"].weight.copy_(randn(*layer.lora_B.shape[1:], seed=7))
                layer.lora_A.copy_(module.lora_A["default"].weight)
                layer.lora_B.copy_(module.lora_B["default"].weight[None])
    assert_close(ours(input_ids=IDS).logits, theirs(input_ids=IDS).logits, rtol=1e-6)
