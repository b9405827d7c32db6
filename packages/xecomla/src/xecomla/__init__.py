"""Zebra-Llama / X-EcoMLA (NeurIPS 2025): MLA + Mamba2 hybrids composed from a pretrained Llama.

Importing this package never imports triton or transformers (the layers import transformers
lazily, when built).
"""

from . import init
from .mla import MLAAttention, MLAConfig

__all__ = ["MLAAttention", "MLAConfig", "init"]
