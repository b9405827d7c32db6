"""The halfcomplex (FFTW r2hc) layout and the spectral product in it.

A real length-N signal has a Hermitian spectrum Y (``Y_{N-k} = conj Y_k``), so N reals describe
it. The halfcomplex layout ``h`` stores

* ``h[0] = Y_0`` and ``h[N/2] = Y_{N/2}`` (both real),
* ``h[k] = Re Y_k`` and ``h[N-k] = Im Y_k`` for ``1 <= k < N/2``.

Example (CPU):

    >>> import torch
    >>> from rdfft.layout import complex_to_hc, hc_to_complex
    >>> y = torch.fft.rfft(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    >>> complex_to_hc(y, 4)
    tensor([10., -2., -2.,  2.])
    >>> torch.equal(hc_to_complex(complex_to_hc(y, 4)), y)
    True
"""

from __future__ import annotations

import functools

import torch

__all__ = ["complex_to_hc", "hc_conj", "hc_mul", "hc_to_complex", "hc_weights", "is_power_of_two"]


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, 8, ..."""
    return isinstance(n, int) and n >= 1 and (n & (n - 1)) == 0


def _check_length(n: int, name: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"{name}: expected an int, got {type(n).__name__}")
    if n < 2 or not is_power_of_two(n):
        raise ValueError(f"{name}: expected a power of two >= 2, got {n}")


def _check_real(h: torch.Tensor, name: str) -> None:
    if not isinstance(h, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(h).__name__}")
    if not h.is_floating_point():
        raise TypeError(f"{name}: expected a real floating-point tensor, got dtype {h.dtype}")
    if h.dim() == 0:
        raise ValueError(f"{name}: expected at least one dimension, got a 0-d tensor")
    _check_length(h.shape[-1], f"{name}.shape[-1]")


@functools.lru_cache(maxsize=64)
def _imag_index(n: int) -> torch.Tensor:
    # Im Y_k for k = 1 .. N/2-1 lives at N-k.
    return torch.arange(n - 1, n // 2, -1)


def hc_to_complex(h: torch.Tensor) -> torch.Tensor:
    """The ``N/2+1`` complex rfft coefficients of a halfcomplex tensor.

    Args:
        h: (..., N) real, N a power of two >= 2, halfcomplex along the last dim.

    Returns:
        (..., N/2+1) complex (complex64 for fp32/bf16 input, complex128 for fp64).
    """
    _check_real(h, "h")
    n = h.shape[-1]
    work = h.double() if h.dtype == torch.float64 else h.float()
    imag = torch.zeros_like(work[..., : n // 2 + 1])
    imag[..., 1 : n // 2] = work[..., _imag_index(n).to(h.device)]
    return torch.complex(work[..., : n // 2 + 1], imag)


def complex_to_hc(y: torch.Tensor, n: int) -> torch.Tensor:
    """Pack ``N/2+1`` rfft coefficients into the halfcomplex layout.

    The imaginary parts of ``Y_0`` and ``Y_{N/2}`` are dropped (zero for a real signal's rfft).

    Args:
        y: (..., N/2+1) complex.
        n: the signal length N, a power of two >= 2.

    Returns:
        (..., N) real of the matching real dtype.
    """
    if not isinstance(y, torch.Tensor) or not y.is_complex():
        got = y.dtype if isinstance(y, torch.Tensor) else type(y).__name__
        raise TypeError(f"y: expected a complex tensor, got {got}")
    _check_length(n, "n")
    if y.shape[-1] != n // 2 + 1:
        raise ValueError(f"y: expected last dim n//2+1 = {n // 2 + 1}, got {y.shape[-1]}")
    out = torch.empty(*y.shape[:-1], n, dtype=y.real.dtype, device=y.device)
    out[..., : n // 2 + 1] = y.real
    out[..., _imag_index(n).to(y.device)] = y.imag[..., 1 : n // 2]
    return out


def hc_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The elementwise complex product of two halfcomplex spectra, in halfcomplex layout.

    DC and Nyquist (real) multiply directly; for ``1 <= k < N/2`` index k gets
    ``ar*br - ai*bi`` and index ``N-k`` gets ``ar*bi + ai*br``. Broadcasts like ``a * b``.

    Args:
        a: (..., N) real halfcomplex.
        b: (..., N) real halfcomplex, same N and dtype.

    Returns:
        (broadcast shape, N), equal to ``complex_to_hc(hc_to_complex(a) * hc_to_complex(b), N)``.

    Example:
        >>> import torch
        >>> a = torch.tensor([1.0, 2.0, 3.0, 4.0])
        >>> hc_mul(a, a)  # (2+4i)^2 = -12+16i
        tensor([  1., -12.,   9.,  16.])
    """
    _check_real(a, "a")
    _check_real(b, "b")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"b: expected last dim {a.shape[-1]} (as a), got {b.shape[-1]}")
    if a.dtype != b.dtype:
        raise TypeError(f"b: expected dtype {a.dtype} (as a), got {b.dtype}")
    n = a.shape[-1]
    m = n // 2
    out = a * b  # right at DC and Nyquist; the rest is overwritten below
    if m > 1:
        ar, ai = a[..., 1:m], a[..., m + 1 :].flip(-1)
        br, bi = b[..., 1:m], b[..., m + 1 :].flip(-1)
        out[..., 1:m] = ar * br - ai * bi
        out[..., m + 1 :] = (ar * bi + ai * br).flip(-1)
    return out


def hc_conj(h: torch.Tensor) -> torch.Tensor:
    """The complex conjugate in halfcomplex layout: indices N/2+1 ... N-1 negated (a new tensor).

    Args:
        h: (..., N) real halfcomplex.

    Returns:
        (..., N), same dtype.
    """
    _check_real(h, "h")
    out = h.clone()
    out[..., h.shape[-1] // 2 + 1 :].neg_()
    return out


@functools.lru_cache(maxsize=64)
def _weights(n: int, dtype: torch.dtype) -> torch.Tensor:
    d = torch.full((n,), n / 2, dtype=torch.float64)
    d[0] = n
    d[n // 2] = n
    return d.to(dtype)


def hc_weights(n: int, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """D = H Hᵀ for the rdFFT matrix H: N at k in {0, N/2}, N/2 elsewhere.

    Args:
        n: the length N (a power of two >= 2).
        dtype: the dtype of the result.
        device: where to put it.

    Returns:
        (N,) tensor.

    Example:
        >>> hc_weights(8)
        tensor([8., 4., 4., 4., 8., 4., 4., 4.])
    """
    _check_length(n, "n")
    return _weights(n, dtype).to(device) if device is not None else _weights(n, dtype).clone()
