"""Zebra-Llama / X-EcoMLA (NeurIPS 2025): MLA + Mamba2 hybrids composed from a pretrained Llama.

Importing this package never imports triton or transformers (the layers import transformers
lazily, when built).
"""

from . import init
from .compose import compose, hybrid_cache
from .distill import distill, ild, kl_divergence, layer_sensitivity
from .layout import (
    HybridLayout,
    kv_cache_bytes,
    recurrent_state_bytes,
    smart_select,
    uniform_select,
)
from .mamba2 import Mamba2FromAttention
from .mla import MLAAttention, MLAConfig

__all__ = [
    "HybridLayout",
    "MLAAttention",
    "MLAConfig",
    "Mamba2FromAttention",
    "compose",
    "distill",
    "hybrid_cache",
    "ild",
    "init",
    "kl_divergence",
    "kv_cache_bytes",
    "layer_sensitivity",
    "recurrent_state_bytes",
    "smart_select",
    "uniform_select",
]
