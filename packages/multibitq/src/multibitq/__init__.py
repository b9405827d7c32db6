"""Efficient Multi-bit Quantization Network Training via Weight Bias Correction and Bit-wise Coreset Sampling (NeurIPS 2025)."""

from multibitq.data import BitwiseCoresetSampler, class_quotas, importance_scores, recalibrate_bn
from multibitq.datasets import digits, synthetic_images
from multibitq.diagnostics import activation_mismatch, gradient_angles
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
from multibitq.training import CORESETS, METHODS, TrainHistory, evaluate, train_multibit

__all__ = [
    "CORESETS",
    "METHODS",
    "SUPPORTED_BITS",
    "BitwiseCoresetSampler",
    "MultiBitConfig",
    "QAct",
    "QConv2d",
    "QLinear",
    "SwitchableBatchNorm2d",
    "TrainHistory",
    "activation_mismatch",
    "check_bits",
    "class_quotas",
    "convert_",
    "correct_weight_bias",
    "current_bits",
    "digits",
    "evaluate",
    "gradient_angles",
    "importance_scores",
    "quantize_activation",
    "quantize_weight",
    "recalibrate_bn",
    "resnet_multibit",
    "set_bits",
    "synthetic_images",
    "train_multibit",
    "using_bits",
]
