"""Efficient Multi-bit Quantization Network Training via Weight Bias Correction and Bit-wise Coreset Sampling (NeurIPS 2025)."""

from multibitq.ops import (
    SUPPORTED_BITS,
    check_bits,
    correct_weight_bias,
    quantize_activation,
    quantize_weight,
)

__all__ = [
    "SUPPORTED_BITS",
    "check_bits",
    "correct_weight_bias",
    "quantize_activation",
    "quantize_weight",
]
