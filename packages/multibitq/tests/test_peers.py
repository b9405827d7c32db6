"""The brevitas peer: same network as ours with its quantizers off; the same training recipe."""

from __future__ import annotations

import copy

import pytest
import torch
from multibitq import MultiBitConfig, convert_, resnet_multibit, train_multibit
from multibitq.modules import quantized_layers
from multibitq.peers import brevitas_available, brevitas_resnet, classifier_accuracy
from multibitq.training import train_classifier
from torch import nn


def _data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.arange(n) % 10


def test_train_classifier_is_the_one_child_joint_recipe():
    """A one-bit-width multi-bit model trained by train_classifier equals train_multibit's joint run."""
    x, y = _data()
    torch.manual_seed(0)
    cfg = MultiBitConfig(bits=(4,), correction="none", seed=3)
    ours = convert_(resnet_multibit(8, 1, 10, 4), cfg)
    theirs = copy.deepcopy(ours)
    h1 = train_multibit(ours, (x, y), cfg, "joint", epochs=2, batch_size=16)
    h2 = train_classifier(theirs, (x, y), epochs=2, batch_size=16, seed=3)
    assert h1.steps == h2.steps == 6 and h1.train_passes == h2.train_passes == 80
    assert h1.losses == h2.losses
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_train_classifier_bad_input():
    x, y = _data(8)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with pytest.raises(TypeError, match="model"):
        train_classifier("net", (x, y), 1)
    with pytest.raises(ValueError, match="epochs"):
        train_classifier(net, (x, y), 0)
    with pytest.raises(ValueError, match="lr"):
        train_classifier(net, (x, y), 1, lr=float("nan"))


needs_brevitas = pytest.mark.skipif(
    not brevitas_available(), reason="brevitas (the 'peers' extra) is not installed"
)


@needs_brevitas
def test_brevitas_model_with_quantizers_off_equals_the_float_model():
    torch.manual_seed(0)
    float_model = resnet_multibit(8, 1, 10, 4).eval()
    x, _ = _data(6)
    off = brevitas_resnet(float_model, None).eval()
    with torch.no_grad():
        assert torch.equal(off(x), float_model(x))
    # the swapped layers are exactly convert_'s (first conv, classifier, skip path untouched)
    import brevitas.nn as qnn

    swapped = {n for n, m in off.named_modules() if isinstance(m, (qnn.QuantConv2d, qnn.QuantReLU))}
    want = {
        n for n, m in quantized_layers(float_model).items() if not isinstance(m, nn.BatchNorm2d)
    }
    assert swapped == want and "conv0" not in swapped and "fc" not in swapped
    assert not any("skip" in n for n in swapped)


@needs_brevitas
@pytest.mark.parametrize("bits", [2, 4])
def test_brevitas_model_quantizes_weights_to_its_levels(bits):
    import brevitas.nn as qnn

    torch.manual_seed(0)
    model = brevitas_resnet(resnet_multibit(8, 1, 10, 4), bits)
    conv = model.layers[0].conv0
    assert isinstance(conv, qnn.QuantConv2d)
    levels = conv.quant_weight().value.detach().unique()
    assert levels.numel() <= 2**bits - 1  # narrow range
    x, y = _data(16)
    h = train_classifier(model, (x, y), epochs=1, batch_size=8)
    assert h.steps == 2 and all(v == v for v in h.losses)
    assert 0.0 <= classifier_accuracy(model, (x, y)) <= 1.0


@needs_brevitas
def test_brevitas_resnet_bad_input():
    model = resnet_multibit(8, 1, 10, 4)
    for bad in (1, 9, 32, 2.0, True):
        with pytest.raises(ValueError, match="bits"):
            brevitas_resnet(model, bad)
    with pytest.raises(TypeError, match="float_model"):
        brevitas_resnet("resnet", 4)
    with pytest.raises(ValueError, match="float_model"):
        brevitas_resnet(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(72, 10)), 4)
