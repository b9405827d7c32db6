"""ParetoQ: Scaling Laws in Extremely Low-bit LLM Quantization (NeurIPS 2025).

Learnable-scale QAT of LLM weights at 1, 1.58 (ternary), 2, 3 and 4 bits with the official
quantizers (sign, Stretched Elastic Quant, LSQ), a ``quantize_`` for transformers models, and an
QAT entry point (``train_qat``, ``python -m paretoq.train``), and an
export to int32-packed low-bit weights with a packed matmul (Triton on CUDA, torch on CPU).
"""

from paretoq.modules import PackedLinear, QuantLinear
from paretoq.ops import alpha_init, packed_matmul, quantize_weight
from paretoq.quantize import model_size_bits, pack_, quantize_
from paretoq.train import train_qat

__all__ = [
    "PackedLinear",
    "QuantLinear",
    "alpha_init",
    "model_size_bits",
    "pack_",
    "packed_matmul",
    "quantize_",
    "quantize_weight",
    "train_qat",
]
