"""Multi-bit layers, convert_, using_bits and the PreAct ResNet."""

from __future__ import annotations

import copy

import pytest
import torch
from multibitq import reference
from multibitq.modules import (
    MultiBitConfig,
    QAct,
    QConv2d,
    QLinear,
    SwitchableBatchNorm2d,
    convert_,
    current_bits,
    resnet_multibit,
    set_bits,
    using_bits,
)
from multibitq.ops import correct_weight_bias, quantize_weight
from torch import nn

from neurips25_core.testing import assert_close, randn


def _model(bn="shared", correction="mean_var", seed=0, **kwargs):
    torch.manual_seed(seed)
    float_model = resnet_multibit(depth=8, in_channels=1, num_classes=10, width=4).double()
    cfg = MultiBitConfig(bits=(2, 4, 32), bn=bn, correction=correction, **kwargs)
    return float_model, convert_(copy.deepcopy(float_model), cfg)


def _x(n=5, seed=1):
    return randn(n, 1, 8, 8, seed=seed, dtype=torch.float64)


def test_convert_swaps_exactly_the_intended_layers():
    _, model = _model()
    kinds = {name: type(m) for name, m in model.named_modules()}
    assert kinds["conv0"] is nn.Conv2d  # first conv stays FP
    assert kinds["fc"] is nn.Linear  # classifier stays FP
    for i in (1, 2):  # skip convs and their BN stay FP
        assert kinds[f"layers.{i}.skip_conv"] is nn.Conv2d
        assert kinds[f"layers.{i}.skip_bn"] is nn.BatchNorm2d
    swapped = sorted(n for n, t in kinds.items() if t in (QConv2d, QLinear, QAct))
    expected = sorted(
        f"layers.{i}.{part}" for i in range(3) for part in ("conv0", "conv1", "act0", "act1")
    )
    assert swapped == expected
    assert not any(t is nn.ReLU for t in kinds.values())
    assert sum(t is nn.BatchNorm2d for t in kinds.values()) == 3 * 2 + 2 + 1  # shared BN kept


def test_convert_shares_parameters_and_keeps_the_state_dict():
    float_model = resnet_multibit(depth=8, in_channels=1, width=4)
    keys = list(float_model.state_dict())
    weight = float_model.layers[0].conv0.weight
    model = convert_(float_model, MultiBitConfig())
    assert model.layers[0].conv0.weight is weight
    assert list(model.state_dict()) == keys


def test_convert_switchable_bn_replaces_only_main_path_bn():
    _, model = _model(bn="switchable")
    kinds = {name: type(m) for name, m in model.named_modules()}
    assert kinds["layers.1.skip_bn"] is nn.BatchNorm2d
    assert kinds["bn"] is SwitchableBatchNorm2d
    assert kinds["layers.0.bn0"] is SwitchableBatchNorm2d
    assert model.bn.trained_bits == (32, 4, 2)


@pytest.mark.parametrize("correction", ["mean_var", "mean", "none"])
def test_32_bits_is_the_float_model_on_its_effective_weights(correction):
    float_model, model = _model(correction=correction)
    with torch.no_grad():
        for name, m in float_model.named_modules():
            if isinstance(model.get_submodule(name), (QConv2d, QLinear)):
                m.weight.copy_(quantize_weight(m.weight, 32))
    x = _x()
    assert current_bits(model) == 32
    for mode in ("eval", "train"):
        getattr(float_model, mode)()
        getattr(model, mode)()
        assert torch.equal(model(x), float_model(x))


def test_low_bit_forward_uses_the_corrected_quantized_weights():
    _, model = _model()
    conv = model.layers[1].conv0
    with using_bits(model, 2):
        w = conv.effective_weight()
    ref = reference.correct_weight_bias(
        reference.quantize_weight(conv.weight, 2), reference.quantize_weight(conv.weight, 32)
    )
    assert_close(w, ref, rtol=1e-13)
    _, plain = _model(correction="none")
    with using_bits(plain, 2):
        assert torch.equal(
            plain.layers[1].conv0.effective_weight(), quantize_weight(conv.weight, 2)
        )


def test_switching_bits_changes_only_bn_running_statistics():
    _, model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    for bits in (4, 2, 3, 32):
        with using_bits(model, bits):
            model(_x())
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(
        k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in changed
    )
    model.eval()
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    for bits in (1, 5, 8):
        with using_bits(model, bits):
            model(_x())
    assert all(torch.equal(frozen[k], v) for k, v in model.state_dict().items())


def test_switchable_bn_keeps_per_bit_statistics():
    _, model = _model(bn="switchable")
    model.train()
    before = copy.deepcopy(model.state_dict())
    with using_bits(model, 4):
        model(_x())
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    # only the 4-bit BatchNorms (and the plain skip BNs, shared by every child) moved
    assert changed
    for k in changed:
        assert ".bn.4." in k or "skip_bn" in k, k
    assert any(".bn.4." in k for k in changed)
    with using_bits(model, 2):
        model(_x(seed=2))
    assert torch.equal(model.bn.bn["4"].running_mean, after["bn.bn.4.running_mean"])
    assert not torch.equal(model.bn.bn["2"].running_mean, before["bn.bn.2.running_mean"])


def test_shared_bn_model_evaluates_at_unseen_bits_and_switchable_refuses():
    _, model = _model()
    model.eval()
    outs = {}
    for bits in (3, 5, 6):
        with using_bits(model, bits):
            outs[bits] = model(_x())
        assert torch.isfinite(outs[bits]).all()
    assert not torch.equal(outs[3], outs[5])
    assert current_bits(model) == 32  # restored
    _, switchable = _model(bn="switchable")
    with using_bits(switchable.eval(), 3), pytest.raises(KeyError, match="no BatchNorm for 3 bits"):
        switchable(_x())


def test_gradients_reach_every_parameter_at_low_bits():
    _, model = _model()
    model.train()
    with using_bits(model, 2):
        model(_x()).square().sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    conv = model.layers[2].conv1
    assert conv.weight.grad.abs().sum() > 0


def test_set_bits_and_using_bits_restore_on_error():
    _, model = _model()
    set_bits(model, 4)

    def fail():
        with using_bits(model, 2):
            assert current_bits(model) == 2
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail()
    assert current_bits(model) == 4


def test_modules_built_directly():
    cfg = MultiBitConfig(bits=(2, 32))
    conv = QConv2d(3, 5, 3, padding=1, cfg=cfg).double()
    lin = QLinear(7, 4, cfg=cfg).double()
    act = QAct()
    conv.bits = lin.bits = act.bits = 2
    x = randn(2, 3, 6, 6, seed=3, dtype=torch.float64)
    w = correct_weight_bias(quantize_weight(conv.weight, 2), quantize_weight(conv.weight, 32))
    assert_close(conv(x), torch.nn.functional.conv2d(x, w, conv.bias, padding=1), rtol=1e-13)
    y = randn(3, 7, seed=4, dtype=torch.float64)
    wl = correct_weight_bias(quantize_weight(lin.weight, 2), quantize_weight(lin.weight, 32))
    assert_close(lin(y), torch.nn.functional.linear(y, wl, lin.bias), rtol=1e-13)
    assert set((act(y) * 3).round().unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_resnet_sizes():
    assert (
        sum(p.numel() for p in resnet_multibit(depth=8, in_channels=1, width=16).parameters())
        == 77754
    )
    model = resnet_multibit(depth=20, in_channels=3, width=4)
    assert len(model.layers) == 9
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
