"""Naive, readable references of rdfft: the spec in code (float64-capable).

* :func:`rdfft_reference` / :func:`irdfft_reference`: ``torch.fft`` plus the halfcomplex pack,
  computed in float64 whatever the input dtype, returned in the input dtype (new tensors).
* :func:`rdfft_loops`: the in-place decimation-in-time algorithm written butterfly by butterfly
  in Python (bit reversal, then stages with the j = 0, j = M/2 and general four-slot cases), on
  one 1-D signal. Slow; for small N in tests.
* :func:`block_circulant_dense`: the dense ΔW of block-circulant coefficients.

Example (CPU):

    >>> import torch
    >>> from rdfft.reference import rdfft_loops, rdfft_reference
    >>> x = torch.tensor([0.0, 0, 1, 0, 0, 0, -1, 0])
    >>> rdfft_reference(x)
    tensor([ 0.,  0.,  0.,  0.,  0.,  2.,  0., -2.])
    >>> torch.equal(rdfft_loops(x.clone()), rdfft_reference(x))
    True
"""

from __future__ import annotations

import math

import torch

from rdfft.layout import complex_to_hc, hc_to_complex

__all__ = [
    "block_circulant_dense",
    "irdfft_reference",
    "rdfft_loops",
    "rdfft_reference",
]


def rdfft_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``complex_to_hc(torch.fft.rfft(x))`` along ``dim`` in float64, cast back to x's dtype.

    Args:
        x: (..., N, ...) real, N a power of two >= 2 along ``dim``.
        dim: the transform dimension.

    Returns:
        A new tensor of x's shape and dtype (halfcomplex along ``dim``).
    """
    xt = x.movedim(dim, -1).double()
    h = complex_to_hc(torch.fft.rfft(xt), xt.shape[-1])
    return h.to(x.dtype).movedim(-1, dim)


def irdfft_reference(h: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.fft.irfft(hc_to_complex(h), n=N)`` along ``dim`` in float64 (carries 1/N).

    Args:
        h: (..., N, ...) real halfcomplex along ``dim``.
        dim: the transform dimension.

    Returns:
        A new tensor of h's shape and dtype.
    """
    ht = h.movedim(dim, -1).double()
    x = torch.fft.irfft(hc_to_complex(ht), n=ht.shape[-1])
    return x.to(h.dtype).movedim(-1, dim)


def _bit_reverse(i: int, bits: int) -> int:
    return int(format(i, f"0{bits}b")[::-1], 2) if bits else 0


def rdfft_loops(h: torch.Tensor) -> torch.Tensor:
    """The forward rdFFT, in place, one butterfly at a time (the spec's algorithm, literally).

    Args:
        h: (N,) real, N a power of two >= 2; overwritten with its halfcomplex spectrum.

    Returns:
        ``h``.
    """
    n = h.shape[-1]
    bits = n.bit_length() - 1
    for i in range(n):
        r = _bit_reverse(i, bits)
        if r > i:
            h[i], h[r] = h[r].clone(), h[i].clone()
    size = 2
    while size <= n:
        half = size // 2
        for k in range(0, n, size):
            e0, o0 = float(h[k]), float(h[k + half])
            h[k], h[k + half] = e0 + o0, e0 - o0
            if size >= 4:  # j = M/2: W^{M/2} = -i, so only the odd Nyquist changes sign
                h[k + 3 * size // 4] = -h[k + 3 * size // 4]
            for j in range(1, half // 2):
                er, ei = float(h[k + j]), float(h[k + half - j])
                odd_r, odd_i = float(h[k + half + j]), float(h[k + size - j])
                wr, wi = math.cos(2 * math.pi * j / size), -math.sin(2 * math.pi * j / size)
                tr, ti = wr * odd_r - wi * odd_i, wr * odd_i + wi * odd_r
                h[k + j] = er + tr
                h[k + size - j] = ei + ti
                h[k + half - j] = er - tr
                h[k + half + j] = ti - ei
        size *= 2
    return h


def block_circulant_dense(c: torch.Tensor) -> torch.Tensor:
    """The dense matrix of block-circulant coefficients.

    Block (i, j) is ``circ(c[i, j])`` with ``circ(v)[r, s] = v[(r - s) mod p]``, so that
    ``circ(v) @ x`` is the circular convolution ``v ⊛ x`` (spectrum ``V · X``).

    Args:
        c: (q_out, q_in, p) coefficients.

    Returns:
        (q_out·p, q_in·p) dense matrix, same dtype.

    Example:
        >>> block_circulant_dense(torch.tensor([[[1.0, 2.0, 3.0]]]))
        tensor([[1., 3., 2.],
                [2., 1., 3.],
                [3., 2., 1.]])
    """
    if c.dim() != 3:
        raise ValueError(f"c: expected (q_out, q_in, p), got shape {tuple(c.shape)}")
    q_out, q_in, p = c.shape
    r = torch.arange(p, device=c.device)
    idx = (r[:, None] - r[None, :]) % p  # (p, p)
    blocks = c[:, :, idx]  # (q_out, q_in, p, p)
    return blocks.permute(0, 2, 1, 3).reshape(q_out * p, q_in * p)
