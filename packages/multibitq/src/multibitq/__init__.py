"""Efficient Multi-bit Quantization Network Training via Weight Bias Correction and Bit-wise Coreset Sampling (NeurIPS 2025)."""

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
from multibitq.ops import (
    SUPPORTED_BITS,
    check_bits,
    correct_weight_bias,
    quantize_activation,
    quantize_weight,
)

__all__ = [
    "SUPPORTED_BITS",
    "MultiBitConfig",
    "QAct",
    "QConv2d",
    "QLinear",
    "SwitchableBatchNorm2d",
    "check_bits",
    "convert_",
    "correct_weight_bias",
    "current_bits",
    "quantize_activation",
    "quantize_weight",
    "resnet_multibit",
    "set_bits",
    "using_bits",
]
