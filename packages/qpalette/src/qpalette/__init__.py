"""Q-Palette: fractional-bit quantizers and mixed-scheme bit allocation (NeurIPS 2025).

Example:
    >>> import torch, qpalette
    >>> q = qpalette.quantize(torch.randn(32, 64), "tcq-2-L8")
    >>> q.dequantize().shape, q.spec.name
    (torch.Size([32, 64]), 'tcq-2-L8')
"""

from .allocation import (
    estimate_sensitivities,
    gaussian_error_table,
    optimal_fractional_bits,
    proxy_latency,
    solve_latency_msq,
    solve_memory_msq,
)
from .codebooks import gaussian_vq, lloyd_max_gaussian, trellis_lut, trellis_tau
from .integration import QPaletteConfig, quantize_, quantize_llama
from .modules import FusedGroup, QPaletteLinear
from .quantizers import (
    DEFAULT_PALETTE,
    QuantizedMatrix,
    QuantizerSpec,
    pack_tiles,
    parse_spec,
    quantize,
    unpack_tiles,
    viterbi_tailbiting,
)
from .rotation import hadamard_transform, random_signs, rotate_weight

__all__ = [
    "DEFAULT_PALETTE",
    "FusedGroup",
    "QPaletteConfig",
    "QPaletteLinear",
    "QuantizedMatrix",
    "QuantizerSpec",
    "estimate_sensitivities",
    "gaussian_error_table",
    "gaussian_vq",
    "hadamard_transform",
    "lloyd_max_gaussian",
    "optimal_fractional_bits",
    "pack_tiles",
    "parse_spec",
    "proxy_latency",
    "quantize",
    "quantize_",
    "quantize_llama",
    "random_signs",
    "rotate_weight",
    "solve_latency_msq",
    "solve_memory_msq",
    "trellis_lut",
    "trellis_tau",
    "unpack_tiles",
    "viterbi_tailbiting",
]
