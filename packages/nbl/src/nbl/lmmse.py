"""The closed-form LMMSE affine map ``y ≈ W x + b`` from calibration statistics."""

from __future__ import annotations

import torch

from .stats import CovStats

__all__ = ["fit", "mse", "predicted_mse"]


def _check(stats) -> None:
    if not isinstance(stats, CovStats):
        raise TypeError(f"stats: expected a CovStats, got {type(stats).__name__}")


def fit(stats: CovStats, ridge: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``W = C_yx (C_xx + λ·tr(C_xx)/d·I)⁻¹`` and ``b = μ_y − W μ_x`` (float64), by Cholesky.

    ``ridge`` λ is relative to the mean eigenvalue of C_xx; the default 0 is the paper's map.

    Example:
        >>> import torch
        >>> from nbl.stats import batch_stats
        >>> x = torch.randn(200, 3, dtype=torch.float64)
        >>> W, b = fit(batch_stats(x, x @ torch.tensor([[1.0, 2, 3]]).double().T + 4))
        >>> [round(v, 6) for v in W[0].tolist()], round(float(b[0]), 6)
        ([1.0, 2.0, 3.0], 4.0)
    """
    _check(stats)
    if not isinstance(ridge, (int, float)) or isinstance(ridge, bool) or not ridge >= 0:
        raise ValueError(f"ridge: expected a float >= 0, got {ridge!r}")
    d = stats.d_in
    if ridge == 0 and stats.n <= d:
        raise ValueError(
            f"stats: C_xx singular: add ridge or more tokens (N={stats.n} <= d_in={d})"
        )
    cxx = stats.cxx
    if ridge > 0:
        cxx = cxx + (ridge * float(torch.trace(cxx)) / d) * torch.eye(
            d, dtype=cxx.dtype, device=cxx.device
        )
    chol, info = torch.linalg.cholesky_ex(cxx)
    if int(info) != 0:
        raise ValueError("stats: C_xx singular: add ridge or more tokens (Cholesky failed)")
    # W Cxx = Cyx  <=>  Cxx Wᵀ = Cxy
    w = torch.cholesky_solve(stats.cyx.T.contiguous(), chol).T.contiguous()
    b = stats.mean_y - w @ stats.mean_x
    return w, b


def mse(stats: CovStats, w: torch.Tensor, b: torch.Tensor) -> float:
    """Per-token ``E‖y − W x − b‖²`` implied by the statistics (unbiased ÷(N−1) convention)."""
    _check(stats)
    e = stats.mean_y - w @ stats.mean_x - b
    val = torch.trace(stats.cyy) - 2 * torch.sum(w * stats.cyx) + torch.sum((w @ stats.cxx) * w)
    return float(val + (e @ e) * stats.n / (stats.n - 1))


def predicted_mse(stats: CovStats) -> float:
    """The LMMSE error ``tr(C_yy − C_yx C_xx⁻¹ C_xy)`` (same for target y₁ and y = x + y₁)."""
    _check(stats)
    if stats.n <= stats.d_in:
        raise ValueError(
            f"stats: C_xx singular: add ridge or more tokens (N={stats.n} <= d_in={stats.d_in})"
        )
    chol, info = torch.linalg.cholesky_ex(stats.cxx)
    if int(info) != 0:
        raise ValueError("stats: C_xx singular: add ridge or more tokens (Cholesky failed)")
    z = torch.cholesky_solve(stats.cyx.T.contiguous(), chol)  # C_xx⁻¹ C_xy
    return float(torch.trace(stats.cyy) - torch.sum(stats.cyx.T * z))
