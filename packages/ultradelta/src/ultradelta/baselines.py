"""The baselines of the paper, built from their papers (data-free forms), as CompressedDelta /
dense tensors with their bit counts: DARE, magnitude (TIES-style) trim, BitDelta, Delta-CoMe-lite."""

from __future__ import annotations

import math

import torch

from .packed import CompressedDelta, CompressedTensor
from .stages import check_float, entropy_bits

__all__ = ["bitdelta", "dare", "delta_come_lite", "magnitude_prune", "matched_sparsity"]


def _check_p(p: float) -> None:
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"p: expected a drop rate in [0, 1), got {p!r}")


def matched_sparsity(ratio: float, value_bits: int = 16) -> float:
    """The sparsity s with 16 / ((1-s) b + H2(1-s)) = ratio (entropy accounting), by bisection.

    Example:
        >>> round(16 / (0.03 * 4 + entropy_bits(0.03)), 1)
        50.9
        >>> s = matched_sparsity(50.9, value_bits=4)
        >>> round(s, 3)
        0.97
    """
    if not ratio > 1:
        raise ValueError(f"ratio: expected > 1, got {ratio}")
    lo, hi = 0.5, 1.0 - 1e-12  # bits per param falls monotonically with s on [0.5, 1)
    for _ in range(200):
        mid = (lo + hi) / 2
        bits = (1 - mid) * value_bits + entropy_bits(1 - mid)
        if 16 / bits < ratio:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _sparse(t: torch.Tensor, kept: torch.Tensor, scale: float) -> CompressedTensor:
    flat = t.reshape(-1).float()
    idx = torch.nonzero(kept.reshape(-1), as_tuple=True)[0]
    return CompressedTensor(tuple(t.shape), idx, None, flat[idx].half(), 16, 0.0, 0.0, scale)


def dare(
    delta: dict[str, torch.Tensor], p: float, generator: torch.Generator | None = None, rescale=True
) -> CompressedDelta:
    """DARE (Yu et al. 2024): drop each entry with probability p, rescale the rest by 1/(1-p)."""
    _check_p(p)
    out = {}
    for k, v in delta.items():
        check_float(v, f"delta[{k!r}]")
        keep = torch.rand(v.shape, generator=generator, dtype=torch.float64) >= p
        out[k] = _sparse(v, keep & (v != 0), 1.0 / (1.0 - p) if rescale else 1.0)
    return CompressedDelta(out, {"method": "dare", "p": p})


def magnitude_prune(delta: dict[str, torch.Tensor], p: float) -> CompressedDelta:
    """TIES-style trim: keep the top ceil((1-p) n) entries by |delta| per tensor, no rescale."""
    _check_p(p)
    out = {}
    for k, v in delta.items():
        check_float(v, f"delta[{k!r}]")
        n_keep = max(1, math.ceil((1 - p) * v.numel()))
        top = torch.topk(v.abs().reshape(-1), n_keep).indices
        keep = torch.zeros(v.numel(), dtype=torch.bool)
        keep[top] = True
        out[k] = _sparse(v, keep.reshape(v.shape) & (v != 0), 1.0)
    return CompressedDelta(out, {"method": "magnitude", "p": p})


def bitdelta(delta: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], float]:
    """BitDelta (Liu et al. 2024), data-free: sign(delta) * mean|delta| per tensor (no scale
    distillation). Returns (dense deltas, bits = 1 per entry + a 16-bit scale per tensor)."""
    out, bits = {}, 0.0
    for k, v in delta.items():
        check_float(v, f"delta[{k!r}]")
        out[k] = torch.sign(v.float()) * v.float().abs().mean()
        bits += v.numel() + 16
    return out, bits


def _rtn_columns(u: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric round-to-nearest per column (absmax scale)."""
    levels = 2 ** (bits - 1) - 1 if bits > 1 else 1
    scale = u.abs().amax(0, keepdim=True).clamp_min(1e-30) / levels
    return torch.clamp(torch.round(u / scale), -levels - (bits > 1), levels) * scale


def delta_come_lite(
    delta: dict[str, torch.Tensor], ranks: tuple[int, int, int]
) -> tuple[dict[str, torch.Tensor], float]:
    """Delta-CoMe-like mixed precision (Ping et al. 2024), data-free: SVD of each delta, the top
    ``ranks[0]`` singular vectors at 8 bits, the next ``ranks[1]`` at 3, the next ``ranks[2]`` at
    2 (round-to-nearest per vector; Delta-CoMe itself uses GPTQ with calibration data).

    Returns (dense deltas, bits: (m + n) b per vector pair + 16-bit sigma and two 16-bit scales)."""
    out, bits = {}, 0.0
    for k, v in delta.items():
        check_float(v, f"delta[{k!r}]")
        u, s, vh = torch.linalg.svd(v.double(), full_matrices=False)
        m, n = v.shape
        rec = torch.zeros(m, n, dtype=torch.float64)
        start = 0
        for b, r in zip((8, 3, 2), ranks):
            r = min(r, s.numel() - start)
            if r <= 0:
                continue
            sl = slice(start, start + r)
            uq = _rtn_columns(u[:, sl], b)
            vq = _rtn_columns(vh[sl].T, b).T
            rec += (uq * s[sl]) @ vq
            bits += r * ((m + n) * b + 48)
            start += r
        out[k] = rec.float()
    return out, bits


def delta_come_ranks_for(delta: dict[str, torch.Tensor], ratio: float) -> tuple[int, int, int]:
    """Ranks (r8, r3, r2) in proportion 1:2:4 whose bit count is closest to 16 N / ratio."""
    n_params = sum(v.numel() for v in delta.values())
    budget = 16 * n_params / ratio
    per_unit = sum((sum(v.shape)) * (8 + 2 * 3 + 4 * 2) + 7 * 48 for v in delta.values())
    unit = max(budget / per_unit, 1e-9)
    r8 = max(1, round(unit))
    return r8, 2 * r8, 4 * r8
