"""Random-sign Hadamard rotation ("left-only" incoherence processing).

W_r = W·diag(s)·Mᵀ and x_r = M·(s ⊙ x), with M orthonormal, so W_r·x_r = W·x. For d = 2**k,
M is the Sylvester Hadamard matrix divided by √d; otherwise d = 2**k·m and M = H_{2^k} ⊗ O_m with
O_m a seeded random orthogonal m×m matrix (the official code uses Hadamard-K blocks instead).
"""

from __future__ import annotations

import functools

import torch

__all__ = [
    "hadamard_transform",
    "inverse_hadamard_transform",
    "random_signs",
    "rotate_weight",
    "unrotate_weight",
]


def random_signs(n: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A seeded vector of n random ±1 values.

    Example:
        >>> random_signs(6, seed=0).abs().sum().item()
        6.0
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2, (n,), generator=g) * 2 - 1).to(dtype)


def _split(n: int) -> tuple[int, int]:
    p = n & -n  # largest power of two dividing n
    return p, n // p


@functools.cache
def _orthogonal(m: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1_000_003 + m)
    q, r = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))[None, :]


def _fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalised Sylvester Walsh-Hadamard transform over the last dim (a power of two)."""
    n = x.shape[-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.view(-1, n // (2 * h), 2, h)
        y = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2)
        h *= 2
    return y.reshape(x.shape)


#: Up to this size the torch path multiplies by the dense H/√n (symmetric, so x @ H = H x).
_DENSE_MAX = 512


@functools.lru_cache(maxsize=32)
def _dense_hadamard(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    eye = torch.eye(n, dtype=torch.float64)
    return (_fwht(eye) / n**0.5).to(dtype=dtype, device=device)


BACKENDS = ("auto", "torch", "triton")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


def _scaled_fwht(x: torch.Tensor, backend: str) -> torch.Tensor:
    """H x / √n over the last dim (a power of two): the torch stages or the Triton ``fwht``."""
    n = x.shape[-1]
    if backend == "auto":
        from neurips25_core.device import use_triton_for

        backend = "triton" if x.is_cuda and use_triton_for(x) and n >= 2 else "torch"
    if backend == "torch" or n == 1:
        if n <= _DENSE_MAX and x.dtype in (torch.float32, torch.float64):
            # small n: one matmul with the cached H/√n beats log2(n) butterfly stages on CPU
            return x @ _dense_hadamard(n, x.dtype, x.device)
        return _fwht(x) / n**0.5
    from .kernels.fwht import fwht_rows

    rows = x.reshape(-1, n).contiguous()
    if rows.dtype not in (torch.float32, torch.float64):
        rows = rows.float()
    return fwht_rows(rows, scale=n**-0.5).to(x.dtype).reshape(x.shape)


def _apply(x: torch.Tensor, transpose: bool, backend: str = "auto") -> torch.Tensor:
    _check_backend(backend)
    n = x.shape[-1]
    p, m = _split(n)
    if m == 1:
        return _scaled_fwht(x, backend)  # symmetric: M = Mᵀ
    o = _orthogonal(m).to(dtype=x.dtype, device=x.device)
    y = x.reshape(*x.shape[:-1], p, m)
    y = y @ (o if transpose else o.T)  # rows: X·Oᵀ (forward) or X·O (transpose)
    y = _scaled_fwht(y.transpose(-1, -2), backend).transpose(-1, -2)
    return y.reshape(x.shape)


def hadamard_transform(
    x: torch.Tensor, signs: torch.Tensor | None = None, backend: str = "auto"
) -> torch.Tensor:
    """x ↦ M·(s ⊙ x) over the last dimension (orthonormal; any size).

    Args:
        x: (..., d) tensor.
        signs: (d,) ±1 vector, or None for all ones.
        backend: the Walsh-Hadamard stages: ``"auto"`` (the Triton ``fwht`` kernel on CUDA
            tensors when Triton is usable, torch otherwise), ``"torch"`` or ``"triton"``.

    Returns:
        (..., d) tensor, same dtype.

    Example:
        >>> x = torch.randn(3, 8, dtype=torch.float64)
        >>> torch.allclose(hadamard_transform(x).norm(dim=-1), x.norm(dim=-1))
        True
    """
    if signs is not None:
        if signs.shape != (x.shape[-1],):
            raise ValueError(f"signs: expected shape ({x.shape[-1]},), got {tuple(signs.shape)}")
        x = x * signs.to(dtype=x.dtype, device=x.device)
    return _apply(x, transpose=False, backend=backend)


def inverse_hadamard_transform(
    y: torch.Tensor, signs: torch.Tensor | None = None, backend: str = "auto"
) -> torch.Tensor:
    """The inverse of :func:`hadamard_transform`: y ↦ s ⊙ (Mᵀ·y)."""
    x = _apply(y, transpose=True, backend=backend)
    if signs is not None:
        x = x * signs.to(dtype=x.dtype, device=x.device)
    return x


def rotate_weight(weight: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """W_r = W·diag(s)·Mᵀ for a (d_out, d_in) weight (each row transformed like an input).

    Example:
        >>> w, x = torch.randn(4, 16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
        >>> s = random_signs(16, seed=1, dtype=torch.float64)
        >>> torch.allclose(rotate_weight(w, s) @ hadamard_transform(x, s), w @ x)
        True
    """
    if weight.ndim != 2:
        raise ValueError(f"weight: expected a 2-D (d_out, d_in) tensor, got {weight.ndim}-D")
    return hadamard_transform(weight, signs)


def unrotate_weight(weight_r: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """The inverse of :func:`rotate_weight`: W = W_r·M·diag(s)."""
    return inverse_hadamard_transform(weight_r, signs)
