"""LoPE registered as a peft method: ``peft.get_peft_model(model, LoPEPeftConfig(...))``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "peft", reason="peft (the `peers` extra) is not installed: run `uv run --with peft==0.21.2`"
)

import lope
from lope.peft_tuner import LoPEPeftConfig, LoPEPeftLayer, set_stage

from neurips25_core.models import tiny_llama, tiny_llama_config


def _base(hidden=16):
    return tiny_llama(
        tiny_llama_config(hidden_size=hidden, num_layers=2, num_heads=2, intermediate_size=24)
    )


def _pair():
    """Our LoPEModel and a peft LoPE model on the same base, with the same (random) tensors."""
    import peft

    torch.manual_seed(0)
    ours = lope.get_peft_model(_base(), lope.LoPEConfig(r=4, lora_dropout=0.0))
    # tiny_llama is seeded: both wrap the same base weights.
    theirs = peft.get_peft_model(_base(), LoPEPeftConfig(r=4, lora_dropout=0.0))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, layer in ours.adapted.items():
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=gen) * 0.1)
            peft_layer = theirs.base_model.model.get_submodule(name)
            assert isinstance(peft_layer, LoPEPeftLayer)
            peft_layer.lope_A["default"].copy_(layer.lora_A)
            peft_layer.lope_B["default"].copy_(layer.lora_B)
            peft_layer.lope_router["default"].copy_(layer.router)
    return ours, theirs


@pytest.mark.parametrize("stage", ["inference", "all", "stage2"])
def test_peft_get_peft_model_equals_lope_model(stage):
    import peft
    from peft.utils import PeftType

    ours, theirs = _pair()
    assert isinstance(theirs, peft.PeftModel)
    assert theirs.peft_config["default"].peft_type == PeftType.LOPE
    ours.set_stage(stage)
    set_stage(theirs, stage)
    ours.eval(), theirs.eval()
    x = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ours(input_ids=x).logits
        got = theirs(input_ids=x).logits
        with theirs.disable_adapter():
            bare = theirs(input_ids=x).logits
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(bare, want)  # the adapter does something


def test_peft_stages_train_the_right_tensors():
    _, theirs = _pair()
    params = set_stage(theirs, "stage2")
    theirs.train()
    x = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(3))
    theirs(input_ids=x, labels=x).loss.backward()
    layer = next(m for m in theirs.modules() if isinstance(m, LoPEPeftLayer))
    assert len(params) == 3 * 2 * 3
    assert torch.all(layer.lope_B["default"].grad[3] == 0)  # B_D frozen in Stage II
    assert layer.lope_B["default"].grad[:3].abs().sum() > 0
    assert layer.lope_router["default"].grad.abs().sum() > 0
    with pytest.raises(ValueError, match="stage"):
        set_stage(theirs, "stage3")


def test_peft_save_and_from_pretrained_round_trip(tmp_path):
    import peft
    from safetensors.torch import load_file

    _, theirs = _pair()
    theirs.eval()
    theirs.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "adapter_model.safetensors")
    assert saved and all(".lope_" in k for k in saved), sorted(saved)[:4]
    config = peft.PeftConfig.from_pretrained(tmp_path)
    assert isinstance(config, LoPEPeftConfig) and config.poison_experts == [3]
    loaded = peft.PeftModel.from_pretrained(_base(), tmp_path)  # the same seeded base
    loaded.eval()
    x = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids=x).logits, theirs(input_ids=x).logits, rtol=0, atol=0
        )


def test_peft_refuses_a_mismatched_checkpoint(tmp_path):
    import peft

    _, theirs = _pair()
    theirs.save_pretrained(tmp_path)
    wider = _base(hidden=32)  # another width: every adapter tensor has the wrong shape
    with pytest.raises(RuntimeError, match="size mismatch"):
        peft.PeftModel.from_pretrained(wider, tmp_path)


def test_peft_config_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="r"):
        LoPEPeftConfig(r=0)
    with pytest.raises(ValueError, match="compensation_k"):
        LoPEPeftConfig(compensation_k=4)
    with pytest.raises(ValueError, match="poison"):
        LoPEPeftConfig(poison_experts=[7])
    with pytest.raises(NotImplementedError, match="merged"):
        _pair()[1].merge_and_unload()
