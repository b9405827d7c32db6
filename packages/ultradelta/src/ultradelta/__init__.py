"""UltraDelta (NeurIPS 2025): data-free, ultra-high-ratio compression of fine-tuning deltas.

Mixed sparsity allocation, distribution-aware quantize-and-prune and trace-norm-guided rescaling,
a packed format with every byte counted, a fused decode-and-add, and the baselines.
"""

from .api import DEFAULT_INCLUDE, UltraDeltaConfig, apply_deltas, compress, compute_deltas
from .baselines import bitdelta, dare, delta_come_lite, magnitude_prune, matched_sparsity
from .ops import apply_compressed, to_device_format
from .packed import CompressedDelta, CompressedTensor
from .stages import (
    allocate_sparsity,
    bernoulli_prune,
    dequantize_codes,
    entropy_bits,
    fake_quant,
    groupwise_prune,
    quantize_codes,
    trace_norm_factors,
    trace_norms,
)

__all__ = [
    "DEFAULT_INCLUDE",
    "CompressedDelta",
    "CompressedTensor",
    "UltraDeltaConfig",
    "allocate_sparsity",
    "apply_compressed",
    "apply_deltas",
    "bernoulli_prune",
    "bitdelta",
    "compress",
    "compute_deltas",
    "dare",
    "delta_come_lite",
    "dequantize_codes",
    "entropy_bits",
    "fake_quant",
    "groupwise_prune",
    "magnitude_prune",
    "matched_sparsity",
    "quantize_codes",
    "to_device_format",
    "trace_norm_factors",
    "trace_norms",
]
