"""Gaussian codebooks: Lloyd-Max scalar levels, 2-D k-means VQ codebooks and the trellis LUT.

Every codebook is fitted to N(0, 1) (or N(0, I₂)) once, deterministically from a seed, and kept in
an in-process cache (no disk cache: fitting takes a second or two).
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = [
    "gaussian_vq",
    "kmeans",
    "lloyd_max_gaussian",
    "lloyd_max_mse",
    "trellis_hash",
    "trellis_lut",
    "trellis_q",
    "trellis_tau",
]

#: Population std of the trellis codebook's coordinates (official ``0.9682458365518543``).
TAU_STD = math.sqrt(15.0 / 16.0)


def _phi(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


@functools.cache
def _lloyd_max(bits: int, iters: int) -> tuple[float, ...]:
    n = 2**bits
    # Start from the companded point density (∝ p^(1/3), the quantiles of N(0, 3)), then iterate
    # the two Lloyd conditions with the closed-form Gaussian centroids, in float64.
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    c = math.sqrt(3.0) * math.sqrt(2.0) * torch.erfinv(2 * u - 1)
    for _ in range(iters):
        b = torch.cat(
            [
                torch.tensor([-math.inf], dtype=torch.float64),
                0.5 * (c[1:] + c[:-1]),
                torch.tensor([math.inf], dtype=torch.float64),
            ]
        )
        p = _cdf(b[1:]) - _cdf(b[:-1])
        c = (_phi(b[:-1]) - _phi(b[1:])) / p.clamp_min(1e-300)
    return tuple(c.tolist())


def lloyd_max_gaussian(bits: int, iters: int = 2000) -> torch.Tensor:
    """The 2**bits Lloyd-Max (MSE-optimal scalar) levels of N(0, 1), ascending, float64.

    Args:
        bits: 1..8.
        iters: Lloyd iterations (closed-form Gaussian centroids).

    Returns:
        (2**bits,) float64 tensor.

    Example:
        >>> lloyd_max_gaussian(1)
        tensor([-0.7979,  0.7979], dtype=torch.float64)
    """
    if not isinstance(bits, int) or isinstance(bits, bool):
        raise TypeError(f"bits: expected an int, got {type(bits).__name__}")
    if not 1 <= bits <= 8:
        raise ValueError(f"bits: expected 1..8, got {bits}")
    return torch.tensor(_lloyd_max(bits, iters), dtype=torch.float64)


def lloyd_max_mse(levels: torch.Tensor) -> float:
    """Exact MSE of nearest-level scalar quantization of N(0, 1) with sorted ``levels``."""
    c = levels.to(torch.float64).sort().values
    b = torch.cat(
        [
            torch.tensor([-math.inf], dtype=torch.float64),
            0.5 * (c[1:] + c[:-1]),
            torch.tensor([math.inf], dtype=torch.float64),
        ]
    )
    p = _cdf(b[1:]) - _cdf(b[:-1])
    # E[(X - c)^2 ; a < X < b] = (1 + c^2) p - 2c (phi(a) - phi(b)) + (a phi(a) - b phi(b))
    pa, pb = _phi(b[:-1]), _phi(b[1:])
    apa = torch.where(torch.isinf(b[:-1]), torch.zeros_like(pa), b[:-1] * pa)
    bpb = torch.where(torch.isinf(b[1:]), torch.zeros_like(pb), b[1:] * pb)
    return float(((1 + c * c) * p - 2 * c * (pa - pb) + (apa - bpb)).sum())


def kmeans(data: torch.Tensor, k: int, iters: int = 40, seed: int = 0) -> torch.Tensor:
    """Plain Lloyd k-means (k-d tree assignments); empty clusters restart at random points.

    Args:
        data: (n, d) samples.
        k: number of centroids (k <= n).
        iters: Lloyd iterations.
        seed: seeds the initial centroids and restarts.

    Returns:
        (k, d) centroids.
    """
    n, d = data.shape
    if k > n:
        raise ValueError(f"k: expected at most n={n} centroids, got {k}")
    from scipy.spatial import cKDTree

    g = torch.Generator().manual_seed(seed)
    x = data.to(torch.float64)
    xn = x.numpy()
    c = x[torch.randperm(n, generator=g)[:k]].clone()
    for _ in range(iters):
        # Nearest centroid by a k-d tree: O(n log k) instead of the O(n k) distance matrix.
        assign = torch.from_numpy(cKDTree(c.numpy()).query(xn, workers=1)[1]).to(torch.long)
        sums = torch.zeros(k, d, dtype=torch.float64).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).to(torch.float64)
        empty = counts == 0
        c = torch.where(empty[:, None], c, sums / counts.clamp_min(1)[:, None])
        if empty.any():
            c[empty] = x[torch.randint(0, n, (int(empty.sum()),), generator=g)]
    return c.to(torch.float32)


@functools.cache
def _gaussian_kmeans(k: int, dim: int, seed: int) -> torch.Tensor:
    n = min(1 << 17, max(1 << 14, 128 * k))
    g = torch.Generator().manual_seed(10_000 + seed)
    data = torch.randn(n, dim, generator=g)
    return kmeans(data, k, iters=40, seed=seed)


def gaussian_vq(bits: float, dim: int = 2, seed: int = 0) -> torch.Tensor:
    """A k-means codebook of 2**(bits·dim) points fitted to N(0, I_dim) (VQ at ``bits`` per weight).

    Args:
        bits: bits per weight; ``bits·dim`` must be an integer in 1..12.
        dim: vector dimension (2 in the palette).
        seed: seeds the samples and the initialisation.

    Returns:
        (2**(bits·dim), dim) float32 tensor.

    Example:
        >>> gaussian_vq(1.5).shape
        torch.Size([8, 2])
    """
    total = bits * dim
    if abs(total - round(total)) > 1e-9 or not 1 <= round(total) <= 12:
        raise ValueError(f"bits: bits·dim must be an integer in 1..12, got bits={bits}, dim={dim}")
    return _gaussian_kmeans(2 ** round(total), dim, seed).clone()


def trellis_q(kv: int) -> int:
    """Index bits Q of the trellis codebook τ for a trellis with KV bits per step (9 if KV <= 8)."""
    return 9 if kv <= 8 else kv + 1


def trellis_tau(Q: int, seed: int = 0) -> torch.Tensor:
    """τ: a k-means codebook of 2**Q points fitted to N(0, I₂), coordinate std rescaled to √(15/16).

    Example:
        >>> tau = trellis_tau(4)
        >>> tau.shape, round(float(tau.std(unbiased=False)), 4)
        (torch.Size([16, 2]), 0.9682)
    """
    if not isinstance(Q, int) or not 1 <= Q <= 15:
        raise ValueError(f"Q: expected an int in 1..15, got {Q!r}")
    tau = _gaussian_kmeans(2**Q, 2, seed).clone()
    return tau / tau.std(unbiased=False) * TAU_STD


def trellis_hash(states: torch.Tensor, Q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode hash of trellis states: (τ index, sign of coordinate 0).

    h = s(s+1) computed in int64 and masked to 16 bits; idx = (h >> (15-Q)) & (2**Q - 1);
    sign = 1 - 2·((h >> 15) & 1).
    """
    s = states.to(torch.int64)
    h = (s * (s + 1)) & 0xFFFF
    idx = (h >> (15 - Q)) & ((1 << Q) - 1)
    sign = 1 - 2 * ((h >> 15) & 1)
    return idx, sign


def trellis_lut(L: int, Q: int, tau: torch.Tensor) -> torch.Tensor:
    """The (2**L, 2) reconstruction of every trellis state: (sign·τ[idx, 0], τ[idx, 1]).

    Example:
        >>> trellis_lut(8, 4, trellis_tau(4)).shape
        torch.Size([256, 2])
    """
    if tau.ndim != 2 or tau.shape != (2**Q, 2):
        raise ValueError(f"tau: expected shape ({2**Q}, 2) for Q={Q}, got {tuple(tau.shape)}")
    if not 2 <= L <= 24:
        raise ValueError(f"L: expected 2..24, got {L}")
    idx, sign = trellis_hash(torch.arange(2**L), Q)
    lut = tau[idx].clone()
    lut[:, 0] = lut[:, 0] * sign.to(lut.dtype)
    return lut
