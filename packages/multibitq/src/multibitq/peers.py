"""The peer a user would pick instead: brevitas's quantization-aware training, one model per bit-width.

brevitas (`Xilinx/brevitas <https://github.com/Xilinx/brevitas>`_, PyPI ``brevitas``, the ``peers``
extra) is the usual PyTorch QAT library; the way its users build a low-bit network is to swap each
layer for its ``brevitas.nn`` twin with a bit-width and train that network (the Dedicated recipe:
one network per bit-width). :func:`brevitas_resnet` does that to the same layers :func:`convert_`
quantizes (:func:`multibitq.modules.quantized_layers`; first conv, classifier and skip path stay
float): ``QuantConv2d``/``QuantLinear(weight_bit_width=b)`` with brevitas's default weight
quantizer (``Int8WeightPerTensorFloat``: per-tensor scale from the max, narrow range, so 2 bits
is ternary) and ``QuantReLU(bit_width=b)`` (its default ``Uint8ActPerTensorFloat``: a learned
per-tensor scale). Our quantizers are DoReFa's (tanh-normalised weights on 2^b levels,
activations clipped to [0, 1]); the two are different quantizers at the same bit-widths, which
is the comparison a user makes.

:func:`brevitas_resnet` with ``bits=None`` builds the same network with every quantizer off; it
equals the float model bit for bit (checked in tests/test_peers.py and before the benchmark
trains anything), so the arm differs from ours only by its quantizers.
"""

from __future__ import annotations

import copy
import importlib.util

import torch
from torch import nn

from multibitq.modules import quantized_layers

__all__ = ["brevitas_available", "brevitas_resnet", "classifier_accuracy"]


def brevitas_available() -> bool:
    """Whether brevitas (the ``peers`` extra) is importable, without importing it."""
    return importlib.util.find_spec("brevitas") is not None


def brevitas_resnet(float_model: nn.Module, bits: int | None) -> nn.Module:
    """A copy of ``float_model`` with brevitas QAT layers where :func:`convert_` would quantize.

    Args:
        float_model: a float network (e.g. :func:`resnet_multibit`); not modified.
        bits: weight and activation bit-width, 2-8 (brevitas's integer quantizers; 1 bit has no
            narrow-range signed level besides 0), or ``None`` for every quantizer off.

    Raises:
        ImportError: brevitas is not installed (install the ``peers`` extra).
        TypeError: ``float_model`` is not an ``nn.Module``.
        ValueError: ``bits`` is not an int in 2..8 or None; the model has nothing to quantize.
    """
    if not isinstance(float_model, nn.Module):
        raise TypeError(f"float_model: expected an nn.Module, got {type(float_model).__name__}")
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int)):
        raise ValueError(f"bits: expected an int in 2..8 or None, got {bits!r}")
    if bits is not None and not 2 <= bits <= 8:
        raise ValueError(f"bits: expected an int in 2..8 or None, got {bits}")
    if not brevitas_available():
        raise ImportError("brevitas is not installed: install the 'peers' extra of multibitq")
    import brevitas.nn as qnn

    model = copy.deepcopy(float_model)
    weight = {} if bits is not None else {"weight_quant": None}
    weight_bits = {"weight_bit_width": bits} if bits is not None else {}
    act = {"bit_width": bits} if bits is not None else {"act_quant": None}
    replacements: dict[str, nn.Module] = {}
    for name, m in quantized_layers(model).items():
        if type(m) is nn.Conv2d:
            new = qnn.QuantConv2d(
                m.in_channels,
                m.out_channels,
                m.kernel_size,
                stride=m.stride,
                padding=m.padding,
                dilation=m.dilation,
                groups=m.groups,
                bias=m.bias is not None,
                **weight,
                **weight_bits,
            )
        elif type(m) is nn.Linear:
            new = qnn.QuantLinear(
                m.in_features, m.out_features, bias=m.bias is not None, **weight, **weight_bits
            )
        elif type(m) is nn.ReLU:
            new = qnn.QuantReLU(**act)
        else:  # BatchNorm stays a float BatchNorm (brevitas networks keep BN in float for QAT)
            continue
        if hasattr(m, "weight"):
            with torch.no_grad():
                new.weight.copy_(m.weight)
                if m.bias is not None:
                    new.bias.copy_(m.bias)
        replacements[name] = new.train(m.training)
    if not any(not isinstance(r, qnn.QuantReLU) for r in replacements.values()):
        raise ValueError(
            "float_model: has no Conv2d or Linear to quantize besides the first conv, the "
            "classifier and the skip path"
        )
    for name, new in replacements.items():
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, new)
    return model


def classifier_accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    """Top-1 accuracy of any classifier on ``(X, y)`` (eval mode, restored after)."""
    x, y = data
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            pred = torch.cat([model(x[s : s + 512]).argmax(1) for s in range(0, len(y), 512)])
    finally:
        model.train(was_training)
    return float((pred == y.reshape(-1)).float().mean())
