"""Canonical correlations between a layer's input and output, and the NBL error bound.

``R = C_yy^{-1/2} C_yx C_xx^{-1/2}``; the canonical correlations ρ_i are its singular values and
the layer score is ``S = Σ_i (1 − ρ_i²)`` over all d pairs, on the residual-included output
``y = x + y₁`` by default (the official choice). The LMMSE error obeys
``MSE = tr(C_yy^{1/2}(I − R Rᵀ)C_yy^{1/2}) ≤ λ_max(C_yy)·S ≤ tr(C_yy)·S``.
"""

from __future__ import annotations

import torch

from .lmmse import fit, mse, predicted_mse
from .stats import CovStats

__all__ = ["correlations", "report"]


def _inv_sqrt(c: torch.Tensor, eig_floor: float, name: str) -> tuple[torch.Tensor, int]:
    evals, evecs = torch.linalg.eigh(c)
    floored = int((evals < eig_floor).sum()) if eig_floor > 0 else 0
    if eig_floor > 0:
        evals = evals.clamp_min(eig_floor)
    elif bool((evals <= 0).any()):
        raise ValueError(
            f"stats: {name} is not positive definite (min eigenvalue "
            f"{float(evals.min()):.3g}): add tokens or pass eig_floor > 0"
        )
    return (evecs * evals.rsqrt()) @ evecs.T, floored


def _target(stats: CovStats, target: str) -> CovStats:
    if not isinstance(stats, CovStats):
        raise TypeError(f"stats: expected a CovStats, got {type(stats).__name__}")
    if target not in ("residual", "attn"):
        raise ValueError(f"target: expected 'residual' or 'attn', got {target!r}")
    if stats.target == target:
        return stats
    if target == "residual" and stats.target == "attn":
        return stats.residual()
    raise ValueError(f"target: cannot derive {target!r} from {stats.target!r} statistics")


def _correlations(stats, target, eig_floor):
    if not isinstance(eig_floor, (int, float)) or not eig_floor >= 0:
        raise ValueError(f"eig_floor: expected a float >= 0, got {eig_floor!r}")
    s = _target(stats, target)
    ix, fx = _inv_sqrt(s.cxx, eig_floor, "C_xx")
    iy, fy = _inv_sqrt(s.cyy, eig_floor, "C_yy")
    rho = torch.linalg.svdvals(iy @ s.cyx @ ix)
    return rho.clamp(0.0, 1.0), fx + fy, s


def correlations(stats: CovStats, target: str = "residual", eig_floor: float = 0.0) -> torch.Tensor:
    """Canonical correlations ρ (descending, clamped to [0, 1] against round-off), float64."""
    return _correlations(stats, target, eig_floor)[0]


def report(stats: CovStats, eig_floor: float = 0.0, ridge: float = 0.0) -> dict[str, float]:
    """``{score, mse, bound_lmax, bound_trace, floored}`` for one layer (residual-target CCA).

    ``eig_floor`` clamps the covariance eigenvalues before the inverse square roots (``floored``
    counts them); with ``ridge > 0`` the ``mse`` is that of the ridge map :func:`nbl.lmmse.fit`.
    """
    rho, floored, s = _correlations(stats, "residual", eig_floor)
    score = float(torch.sum(1 - rho * rho))
    lmax = float(torch.linalg.eigvalsh(s.cyy)[-1])
    return {
        "score": score,
        "mse": predicted_mse(stats) if ridge == 0 else mse(stats, *fit(stats, ridge)),
        "bound_lmax": lmax * score,
        "bound_trace": float(torch.trace(s.cyy)) * score,
        "floored": floored,
    }
