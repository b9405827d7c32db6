"""FlashDP: Private Training Large Language Models with Efficient DP-SGD (NeurIPS 2025).

Per-layer DP-SGD: each parameter tensor is clipped on its own inside its layer's backward, with
the per-sample weight gradients formed chunk by chunk and never stored for the whole batch.
"""

from . import ops
from .layers import DPEmbedding, DPLayerNorm, DPLinear, DPRMSNorm, dp_conv1d_class
from .ops import clipped_linear_weight_grad, per_sample_norms
from .privacy import (
    DPOptimizer,
    FlashDPConfig,
    PoissonSampler,
    PrivacyAccountant,
    dp_groups,
    make_private,
    per_sample_lm_loss,
)

__all__ = [
    "DPEmbedding",
    "DPLayerNorm",
    "DPLinear",
    "DPOptimizer",
    "DPRMSNorm",
    "FlashDPConfig",
    "PoissonSampler",
    "PrivacyAccountant",
    "clipped_linear_weight_grad",
    "dp_conv1d_class",
    "dp_groups",
    "make_private",
    "ops",
    "per_sample_lm_loss",
    "per_sample_norms",
]
