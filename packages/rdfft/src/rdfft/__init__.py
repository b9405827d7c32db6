"""rdFFT: the in-place real-domain FFT (N reals -> N reals, halfcomplex layout) with cache-free
autograd, and block-circulant adapters built on it (NeurIPS 2025; arXiv 2511.01385).

Example (CPU):

    >>> import torch, rdfft
    >>> x = torch.randn(3, 16, dtype=torch.float64)
    >>> h = rdfft.rdfft(x)
    >>> torch.allclose(h, rdfft.complex_to_hc(torch.fft.rfft(x), 16))
    True
    >>> torch.allclose(rdfft.irdfft(h), x)
    True
"""

from rdfft.layers import (
    BCAdapter,
    BlockCirculantLinear,
    SpectrumCache,
    apply_bca,
    bca_parameter_groups,
    block_circulant_matmul,
    circulant_reconstruct_,
)
from rdfft.layout import complex_to_hc, hc_conj, hc_mul, hc_to_complex, hc_weights
from rdfft.ops import HcMatmul, IrdFFT, RdFFT, hc_matmul, irdfft, irdfft_, rdfft, rdfft_

__all__ = [
    "BCAdapter",
    "BlockCirculantLinear",
    "HcMatmul",
    "IrdFFT",
    "RdFFT",
    "SpectrumCache",
    "apply_bca",
    "bca_parameter_groups",
    "block_circulant_matmul",
    "circulant_reconstruct_",
    "complex_to_hc",
    "hc_conj",
    "hc_matmul",
    "hc_mul",
    "hc_to_complex",
    "hc_weights",
    "irdfft",
    "irdfft_",
    "rdfft",
    "rdfft_",
]
