"""CodeGEMM: A Codebook-Centric Approach to Efficient GEMM in Quantized LLMs (NeurIPS 2025).

Codebook-quantized linear layers (the AQLM/CodeGEMM additive format, presets m1v4 and m2v8 at
2.125 bits per weight) with two matmul paths side by side: the Psumbook GEMM (the method) and
dequantize-then-GEMM (the baseline).
"""

from .config import CodebookConfig
from .format import check_format, from_aqlm, from_official, to_aqlm, to_official
from .modules import CodebookLinear, quantize_, quantize_linear
from .ops import codebook_matmul, dequantize_weight
from .quantizer import QuantizeResult, quantize_weight, round_to_nearest

__all__ = [
    "CodebookConfig",
    "CodebookLinear",
    "QuantizeResult",
    "check_format",
    "codebook_matmul",
    "dequantize_weight",
    "from_aqlm",
    "from_official",
    "quantize_",
    "quantize_linear",
    "quantize_weight",
    "round_to_nearest",
    "to_aqlm",
    "to_official",
]
