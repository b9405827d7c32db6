"""Naive, readable reference implementations: the spec in code, float64, loops and double sums.

These are what the fast paths (:func:`lrannealing.areas`, the fitted objective) are tested against.
They are O(T) loops or O(T²) sums: use them on T ≤ a few thousand.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "huber",
    "huber_log_objective",
    "mpl_loop",
    "s1_loop",
    "s2_closed_form",
    "s2_double_sum",
    "s2_limit_decay_one",
    "s2_recursion",
]


def s1_loop(lrs, include_step0: bool = True) -> np.ndarray:
    """S₁(s) = Σ_{i=0}^{s} η_i (or Σ_{i=1}^{s} when ``include_step0`` is False), by a Python loop."""
    lrs = np.asarray(lrs, dtype=np.float64)
    out = np.empty_like(lrs)
    total = 0.0
    for s, eta in enumerate(lrs):
        if s > 0 or include_step0:
            total += eta
        out[s] = total
    return out


def s2_recursion(lrs, decay: float) -> np.ndarray:
    """S₂ by the momentum recursion m_i = λ·m_{i−1} + (η_{i−1} − η_i), S₂(s) = Σ_{i=1}^{s} m_i."""
    lrs = np.asarray(lrs, dtype=np.float64)
    out = np.zeros_like(lrs)
    m = 0.0
    total = 0.0
    for i in range(1, lrs.size):
        m = decay * m + (lrs[i - 1] - lrs[i])
        total += m
        out[i] = total
    return out


def s2_double_sum(lrs, decay: float) -> np.ndarray:
    """S₂(s) = Σ_{i=1}^{s} Σ_{k=1}^{i} Δ_k·λ^{i−k}, the definition written out (O(T²))."""
    lrs = np.asarray(lrs, dtype=np.float64)
    delta = np.zeros_like(lrs)
    delta[1:] = lrs[:-1] - lrs[1:]
    inner = np.zeros_like(lrs)  # inner[i] = Σ_{k=1}^{i} Δ_k·λ^{i−k}, each summed afresh
    for i in range(1, lrs.size):
        k = np.arange(1, i + 1)
        inner[i] = np.sum(delta[1 : i + 1] * decay ** (i - k))
    out = np.zeros_like(lrs)
    for s in range(1, lrs.size):
        out[s] = out[s - 1] + inner[s]
    return out


def mpl_loop(lrs, steps, L0, A, alpha, B, C, beta, gamma, warmup_steps: int = 0) -> np.ndarray:
    """The multi-power law by its definition, one step and one drop at a time (Luo et al. 2025)."""
    lrs = np.asarray(lrs, dtype=np.float64)
    out = []
    for t in steps:
        s1 = lrs[: t + 1].sum()
        drop = 0.0
        for k in range(warmup_steps + 1, t + 1):
            s_k = lrs[k : t + 1].sum()
            eta = max(lrs[k], 1e-10 * lrs.max())
            drop += (lrs[k - 1] - lrs[k]) * (1.0 - (C * eta ** (-gamma) * s_k + 1.0) ** (-beta))
        out.append(L0 + A * s1 ** (-alpha) - B * drop)
    return np.array(out)


def s2_closed_form(lrs, decay: float) -> np.ndarray:
    """S₂(s) = [(η₀ − η_s) − Σ_{k=1}^{s} Δ_k·λ^{s−k+1}] / (1 − λ) (needs λ < 1)."""
    lrs = np.asarray(lrs, dtype=np.float64)
    delta = np.zeros_like(lrs)
    delta[1:] = lrs[:-1] - lrs[1:]
    out = np.zeros_like(lrs)
    for s in range(1, lrs.size):
        k = np.arange(1, s + 1)
        tail = np.sum(delta[1 : s + 1] * decay ** (s - k + 1))
        out[s] = ((lrs[0] - lrs[s]) - tail) / (1.0 - decay)
    return out


def s2_limit_decay_one(lrs) -> np.ndarray:
    """The λ → 1 limit of S₂: Σ_{i=1}^{s} (η₀ − η_i), the area between the η₀ line and the schedule."""
    lrs = np.asarray(lrs, dtype=np.float64)
    gap = lrs[0] - lrs
    gap[0] = 0.0
    return np.cumsum(gap)


def huber(r, delta: float) -> np.ndarray:
    """Huber_δ(r) = ½r² if |r| < δ else δ|r| − ½δ²."""
    r = np.asarray(r, dtype=np.float64)
    out = np.empty_like(r)
    for j, x in np.ndenumerate(r):
        out[j] = 0.5 * x * x if abs(x) < delta else delta * abs(x) - 0.5 * delta * delta
    return out


def huber_log_objective(observed, predicted, delta: float) -> float:
    """Σ Huber_δ(log L_obs − log L_pred): summed over every point, as the reference script does."""
    r = np.log(np.asarray(observed, dtype=np.float64)) - np.log(
        np.asarray(predicted, dtype=np.float64)
    )
    return float(huber(r, delta).sum())
