"""EasySpec: Layer-Parallel Speculative Decoding for Efficient Multi-GPU Utilization (NeurIPS 2025)."""

from .draft import FuzzyDraft, layer_groups
from .generate import SpecStats, autoregressive_generate, speculative_generate
from .sampling import chain_law, sampling_probs, verify_chain

__all__ = [
    "FuzzyDraft",
    "SpecStats",
    "autoregressive_generate",
    "chain_law",
    "layer_groups",
    "sampling_probs",
    "speculative_generate",
    "verify_chain",
]
