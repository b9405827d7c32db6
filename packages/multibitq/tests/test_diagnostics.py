"""recalibrate_bn, activation_mismatch and gradient_angles."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from multibitq.data import recalibrate_bn
from multibitq.diagnostics import activation_mismatch, gradient_angles
from multibitq.modules import MultiBitConfig, convert_, current_bits, resnet_multibit, using_bits

from neurips25_core.testing import randint, randn


def _model(bn="shared", correction="mean_var"):
    torch.manual_seed(0)
    cfg = MultiBitConfig(bits=(2, 4, 32), bn=bn, correction=correction)
    return convert_(resnet_multibit(depth=8, in_channels=1, num_classes=5, width=4).double(), cfg)


def _batches(n=3):
    return [
        (randn(6, 1, 8, 8, seed=i, dtype=torch.float64), randint(0, 5, 6, seed=i)) for i in range(n)
    ]


def test_recalibrate_bn_estimates_exact_statistics_for_an_unseen_bit():
    model = _model(bn="switchable")
    model.train()
    before = copy.deepcopy(model.state_dict())
    params = {k: v.clone() for k, v in model.named_parameters()}
    data = _batches()
    inputs = []  # what the last BN sees during the calibration passes (the others normalise by
    # their batch statistics then, as in Any-Precision's calibration)
    handle = model.bn.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
    recalibrate_bn(model, 3, data)
    handle.remove()
    assert len(inputs) == 3
    assert model.training and current_bits(model) == 32
    assert model.bn.trained_bits == (32, 4, 2, 3)
    after = model.state_dict()
    for k, v in before.items():  # the existing children and every plain BN are untouched
        assert torch.equal(v, after[k]), k
    for k, p in model.named_parameters():
        if ".bn.3." not in k:
            assert torch.equal(p, params[k]), k
    # the 3-bit BN of the last layer holds the exact mean/var of its inputs over the three batches
    model.eval()
    acts = torch.cat(inputs).transpose(0, 1).reshape(inputs[0].shape[1], -1)
    bn3 = model.bn.bn["3"]
    torch.testing.assert_close(bn3.running_mean, acts.mean(1), rtol=0, atol=1e-12)
    # BatchNorm's running variance averages the per-batch unbiased variances
    per_batch = torch.stack([a.transpose(0, 1).reshape(a.shape[1], -1).var(1) for a in inputs])
    torch.testing.assert_close(bn3.running_var, per_batch.mean(0), rtol=1e-12, atol=1e-12)
    # 3-bit BN copied its affine parameters from the nearest trained bit-width (2 and 4: the larger)
    assert torch.equal(bn3.weight, model.bn.bn["4"].weight)
    with using_bits(model, 3):
        assert torch.isfinite(model(data[0][0])).all()


def test_recalibrate_bn_refuses_shared_bn_and_bad_input():
    with pytest.raises(ValueError, match="model: has no SwitchableBatchNorm2d"):
        recalibrate_bn(_model(), 3, _batches())
    model = _model(bn="switchable")
    with pytest.raises(ValueError, match="loader: yielded no batch"):
        recalibrate_bn(model, 3, [])
    with pytest.raises(ValueError, match="num_batches"):
        recalibrate_bn(model, 3, _batches(), num_batches=0)
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        recalibrate_bn(model, 12, _batches())
    with pytest.raises(TypeError, match="loader: expected an iterable"):
        recalibrate_bn(model, 3, 5)
    assert model.bn.trained_bits == (32, 4, 2)  # nothing was added by the refused calls


def test_activation_mismatch_is_zero_at_32_bits_and_matches_its_formula():
    model = _model()
    data = _batches()
    zero = activation_mismatch(model, data, 32)
    assert set(zero) == {
        "layers.0.bn0",
        "layers.0.bn1",
        "layers.1.bn0",
        "layers.1.bn1",
        "layers.1.skip_bn",
        "layers.2.bn0",
        "layers.2.bn1",
        "layers.2.skip_bn",
        "bn",
    }
    assert all(v == 0 for v in zero.values())
    values = activation_mismatch(model, data, 2, num_batches=2)
    assert all(math.isfinite(v) and v >= 0 for v in values.values())
    assert values["layers.0.bn0"] == pytest.approx(0, abs=1e-12)  # its input is the FP stem's

    def moments(bits):
        acts = []
        h = model.layers[1].bn1.register_forward_hook(lambda m, a, o: acts.append(a[0]))
        with torch.no_grad(), using_bits(model.eval(), bits):
            for x, _ in data[:2]:
                model(x)
        h.remove()
        a = torch.cat(acts).transpose(0, 1).reshape(acts[0].shape[1], -1)
        return a.mean(1), a.std(1, unbiased=False)

    (mu_b, sd_b), (mu_r, sd_r) = moments(2), moments(32)
    expected = ((mu_b - mu_r).abs() / sd_r + (sd_b / sd_r).log().abs()).mean()
    assert values["layers.1.bn1"] == pytest.approx(float(expected), rel=1e-9)
    switchable = activation_mismatch(_model(bn="switchable"), data, 4)
    assert "bn" in switchable and not any(".bn." in k for k in switchable)


def test_gradient_angles_match_a_direct_computation_and_leave_the_model_alone():
    model = _model()
    model.train()
    x, y = _batches(1)[0]
    state = copy.deepcopy(model.state_dict())
    angles = gradient_angles(model, (x, y), bits=(32, 2, 4))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(p.grad is None for p in model.parameters())
    conv = model.layers[2].conv1
    assert set(angles["layers.2.conv1"]) == {(32, 4), (32, 2), (4, 2)}
    grads = {}
    for b in (32, 2):
        m = copy.deepcopy(model)
        with using_bits(m, b):
            F.cross_entropy(m(x), y).backward()
        grads[b] = m.layers[2].conv1.weight.grad.reshape(-1)
    cos = grads[32] @ grads[2] / (grads[32].norm() * grads[2].norm())
    assert angles["layers.2.conv1"][(32, 2)] == pytest.approx(
        math.degrees(math.acos(float(cos))), rel=1e-9
    )
    assert all(0 <= a <= 180 for layer in angles.values() for a in layer.values())
    assert conv.weight.grad is None
    with pytest.raises(ValueError, match="bits: expected at least two"):
        gradient_angles(model, (x, y), bits=(2, 2))
    with pytest.raises(ValueError, match="batch: expected a pair"):
        gradient_angles(model, x, bits=(2, 32))
    with pytest.raises(ValueError, match="batch: expected integer class labels"):
        gradient_angles(model, (x, y.double()), bits=(2, 32))
