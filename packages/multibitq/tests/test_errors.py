"""Bad input raises a clear error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from multibitq.data import BitwiseCoresetSampler, importance_scores
from multibitq.modules import MultiBitConfig, convert_, resnet_multibit, set_bits, using_bits
from multibitq.ops import check_bits, correct_weight_bias, quantize_activation, quantize_weight
from torch import nn
from torch.utils.data import TensorDataset


@pytest.mark.parametrize("bits", [0, 9, 16, 33, -1])
def test_bits_out_of_range(bits):
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        quantize_weight(torch.ones(2, 2), bits)
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        quantize_activation(torch.ones(2, 2), bits)


@pytest.mark.parametrize("bits", [2.0, "4", True, None])
def test_bits_of_the_wrong_type(bits):
    with pytest.raises(TypeError, match="bits: expected an int"):
        quantize_weight(torch.ones(2, 2), bits)


def test_numpy_int_bits_are_accepted():
    assert check_bits(np.int64(4)) == 4


def test_integer_tensors_are_refused():
    with pytest.raises(TypeError, match="w: expected a floating-point tensor"):
        quantize_weight(torch.ones(2, 2, dtype=torch.long), 2)
    with pytest.raises(TypeError, match=r"x: expected a torch\.Tensor"):
        quantize_activation([1.0], 2)


def test_correction_bad_shapes_and_options():
    w = torch.randn(3, 4)
    with pytest.raises(ValueError, match="w_ref: expected the shape of w_q"):
        correct_weight_bias(w, torch.randn(3, 5))
    with pytest.raises(ValueError, match="w_q: expected a 2-D"):
        correct_weight_bias(torch.randn(3, 4, 2), torch.randn(3, 4, 2))
    with pytest.raises(ValueError, match="w_q: expected a 2-D"):
        correct_weight_bias(torch.randn(5), torch.randn(5))
    with pytest.raises(TypeError, match="w_ref: expected dtype"):
        correct_weight_bias(w, w.double())
    with pytest.raises(ValueError, match="granularity"):
        correct_weight_bias(w, w.clone(), granularity="row")
    with pytest.raises(ValueError, match="mode"):
        correct_weight_bias(w, w.clone(), mode="var")
    with pytest.raises(TypeError, match="stats_grad"):
        correct_weight_bias(w, w.clone(), stats_grad=1)


# ----- modules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bits": (1, 9)}, ValueError, "bits: expected an int in 1-8 or 32"),
        ({"bits": (0,)}, ValueError, "bits: expected an int in 1-8 or 32"),
        ({"bits": (16, 32)}, ValueError, "bits: expected an int in 1-8 or 32"),
        ({"bits": ()}, ValueError, "bits: expected at least one"),
        ({"bits": (4, 4)}, ValueError, "bits: expected distinct"),
        ({"bits": 4}, TypeError, "bits: expected a sequence"),
        ({"bits": (2.5,)}, TypeError, "bits: expected an int"),
        ({"prune_rate": 1.0}, ValueError, r"prune_rate: expected a float in \[0, 1\)"),
        ({"prune_rate": -0.1}, ValueError, "prune_rate"),
        ({"prune_rate": float("nan")}, ValueError, "prune_rate"),
        ({"prune_rate": "0.5"}, TypeError, "prune_rate"),
        ({"correction": "var"}, ValueError, "correction: expected one of"),
        ({"bn": "sync"}, ValueError, "bn: expected one of"),
        ({"score": "loss"}, ValueError, "score: expected one of"),
        ({"selection": "greedy"}, ValueError, "selection: expected one of"),
        ({"granularity": "row"}, ValueError, "granularity: expected one of"),
        ({"rescore_every": 0}, ValueError, "rescore_every: expected an int >= 1"),
        ({"rescore_every": 1.5}, TypeError, "rescore_every: expected an int"),
        ({"seed": None}, TypeError, "seed: expected an int"),
        ({"stats_grad": "yes"}, TypeError, "stats_grad: expected a bool"),
    ],
)
def test_config_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiBitConfig(**kwargs)


def test_config_sorts_bits_descending():
    assert MultiBitConfig(bits=(2, 32, 4)).bits == (32, 4, 2)


def test_convert_and_using_bits_bad_input():
    model = resnet_multibit(depth=8, in_channels=1, width=4)
    with pytest.raises(TypeError, match="cfg: expected a MultiBitConfig"):
        convert_(model, {"bits": (2, 32)})
    with pytest.raises(TypeError, match=r"model: expected an nn\.Module"):
        convert_("resnet", MultiBitConfig())
    with pytest.raises(ValueError, match="model: has no multi-bit layers"):
        using_bits(model, 2).__enter__()
    with pytest.raises(ValueError, match="model: has no Conv2d or Linear to quantize"):
        convert_(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Linear(2, 2)), MultiBitConfig())
    convert_(model, MultiBitConfig())
    with pytest.raises(ValueError, match="model: is already multi-bit"):
        convert_(model, MultiBitConfig())
    for bits in (0, 9, 16):
        with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
            using_bits(model, bits).__enter__()
        with pytest.raises(ValueError, match="bits"):
            set_bits(model, bits)
    with pytest.raises(ValueError, match="depth: expected 6n"):
        resnet_multibit(depth=10)
    with pytest.raises(TypeError, match="width: expected an int"):
        resnet_multibit(width=16.0)


# ----- data ----------------------------------------------------------------------------------


def _converted():
    return convert_(
        resnet_multibit(depth=8, in_channels=1, num_classes=3, width=4), MultiBitConfig()
    )


def test_importance_scores_bad_input():
    model = _converted()
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="dataset: expected labeled samples"):
        importance_scores(model, TensorDataset(x), 2)
    with pytest.raises(ValueError, match="dataset: expected integer class labels"):
        importance_scores(model, TensorDataset(x, y.float()), 2)
    with pytest.raises(TypeError, match="dataset: expected a torch Dataset"):
        importance_scores(model, x, 2)
    with pytest.raises(ValueError, match=r"dataset: labels must lie in \[0, 3\)"):
        importance_scores(model, (x, torch.tensor([0, 1, 3, 0])), 2)
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        importance_scores(model, (x, y), 12)
    with pytest.raises(ValueError, match="score: expected one of"):
        importance_scores(model, (x, y), 2, score="loss")
    with pytest.raises(ValueError, match="model: has no multi-bit layers"):
        importance_scores(resnet_multibit(depth=8, in_channels=1), (x, y), 2)


def test_sampler_bad_input():
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    with pytest.raises(ValueError, match=r"k: expected between the number of classes \(3\)"):
        BitwiseCoresetSampler(labels, k=2, bits=(2,))
    with pytest.raises(ValueError, match="k: expected between"):
        BitwiseCoresetSampler(labels, k=8, bits=(2,))
    with pytest.raises(TypeError, match="k: expected an int"):
        BitwiseCoresetSampler(labels, k=3.0, bits=(2,))
    with pytest.raises(ValueError, match="labels: expected a 1-D integer tensor"):
        BitwiseCoresetSampler(labels.float(), k=3, bits=(2,))
    with pytest.raises(TypeError, match="labels: expected a 1-D integer tensor"):
        BitwiseCoresetSampler([0, 1], k=2, bits=(2,))
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        BitwiseCoresetSampler(labels, k=3, bits=(2, 16))
    with pytest.raises(ValueError, match="selection: expected one of"):
        BitwiseCoresetSampler(labels, k=3, bits=(2,), selection="greedy")
    sampler = BitwiseCoresetSampler(labels, k=3, bits=(2,))
    with pytest.raises(ValueError, match="bits: expected one of the sampler's"):
        sampler.select(4)
    with pytest.raises(ValueError, match=r"scores: expected a tensor of shape \(7,\)"):
        sampler.select(2, torch.ones(6))
    with pytest.raises(ValueError, match="scores: expected finite non-negative"):
        sampler.select(2, -torch.ones(7))
    with pytest.raises(ValueError, match="round: expected a non-negative int"):
        sampler.select(2, round=-1)


def test_train_multibit_bad_input():
    from multibitq import MultiBitConfig, convert_, evaluate, train_multibit

    cfg = MultiBitConfig(bits=(2, 32), prune_rate=0.8)
    model = convert_(resnet_multibit(depth=8, in_channels=1, width=4), cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.rand(20, 1, 8, 8), torch.arange(20) % 10
    with pytest.raises(ValueError, match="method: expected one of"):
        train_multibit(model, (x, y), cfg, method="slimmable")
    with pytest.raises(ValueError, match="coreset: expected one of"):
        train_multibit(model, (x, y), cfg, coreset="herding")
    with pytest.raises(TypeError, match="cfg: expected a MultiBitConfig"):
        train_multibit(model, (x, y), {"bits": (2,)})
    with pytest.raises(ValueError, match="epochs: expected a positive int"):
        train_multibit(model, (x, y), cfg, epochs=0)
    with pytest.raises(ValueError, match="batch_size: expected a positive int"):
        train_multibit(model, (x, y), cfg, batch_size=0)
    with pytest.raises(ValueError, match="lr: expected a finite number"):
        train_multibit(model, (x, y), cfg, lr=float("nan"))
    with pytest.raises(
        ValueError, match=r"prune_rate: 0.8 leaves k=4 samples .* fewer than the 10"
    ):
        train_multibit(model, (x, y), cfg)
    with pytest.raises(ValueError, match="dataset: expected labeled samples"):
        train_multibit(model, torch.utils.data.TensorDataset(x), cfg)
    with pytest.raises(ValueError, match=r"train_set: labels must lie in \[0, 10\)"):
        train_multibit(model, (x, y + 5), cfg, method="joint")
    with pytest.raises(ValueError, match="model: has no multi-bit layers"):
        train_multibit(resnet_multibit(depth=8, in_channels=1, width=4), (x, y), cfg)
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        evaluate(model, (x, y), bits=16)
    for name, value in model.state_dict().items():  # nothing was trained
        assert torch.equal(value, before[name]), name
