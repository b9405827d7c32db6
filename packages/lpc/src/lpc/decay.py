"""Time decay of a continuation probability (paper §3.4) and the static heap key derived from it.

Think time is modelled as exponential with mean ``tau``: a conversation that would continue with
probability ``p`` right after its turn, and has been silent for ``elapsed`` seconds since, still
continues with probability

    pi = p e^{-elapsed/tau} / (p e^{-elapsed/tau} + 1 - p),   i.e.  logit pi = logit p - elapsed/tau.

Every conversation decays with the same ``tau``, so ``logit pi_c(t) = k_c - t/tau`` with
``k_c = logit p_c + t_last_c/tau``: ranking blocks by ``k`` (the static key) ranks them by ``pi`` at
every instant, without re-scoring.

    >>> from lpc.decay import continuation_prob, static_key
    >>> float(continuation_prob(0.7, 0.0, tau=100.0))
    0.7
    >>> round(float(continuation_prob(0.5, 100.0, tau=100.0)), 6)
    0.268941
    >>> float(static_key(1.0, 5.0, tau=100.0))
    inf
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["P_CLIP", "check_probability", "check_tau", "continuation_prob", "logit", "static_key"]

#: Probabilities strictly inside (0, 1) are clipped to [P_CLIP, 1 - P_CLIP] before the logit is
#: taken for a heap key, so a confident predictor cannot overflow the key; 0 and 1 stay exact
#: (keys -inf and +inf).
P_CLIP = 1e-6


def check_tau(tau: float, name: str = "tau") -> float:
    """``tau`` as a float, or a ValueError naming it when it is not a finite number > 0."""
    if isinstance(tau, bool) or not isinstance(tau, int | float | np.floating | np.integer):
        raise TypeError(f"{name}: expected a number > 0, got {type(tau).__name__}")
    tau = float(tau)
    if not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {tau!r}")
    return tau


def check_probability(p, name: str = "p") -> np.ndarray:
    """``p`` as a float64 array, or a ValueError naming it when any value is NaN or outside [0, 1]."""
    arr = np.asarray(p, dtype=np.float64)
    bad = np.isnan(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        first = arr[bad].ravel()[0]
        raise ValueError(f"{name}: expected probabilities in [0, 1], got {first!r}")
    return arr


def logit(p) -> np.ndarray:
    """``log(p / (1 - p))`` in float64; 0 -> -inf, 1 -> +inf."""
    arr = check_probability(p)
    with np.errstate(divide="ignore"):
        return np.log(arr) - np.log1p(-arr)


def _expit(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def continuation_prob(p, elapsed, tau: float) -> np.ndarray:
    """The probability that a conversation still continues after ``elapsed`` seconds of silence.

    Args:
        p: the predicted continuation probability right after the turn, in [0, 1].
        elapsed: seconds since the conversation's last access, >= 0 (broadcasts with ``p``).
        tau: the mean think time of the workload, seconds, > 0.

    Returns:
        float64 array ``pi`` with ``logit pi = logit p - elapsed / tau``; ``p`` of exactly 0 or 1
        stays 0 or 1 for every ``elapsed``.
    """
    tau = check_tau(tau)
    p = check_probability(p)
    elapsed = np.asarray(elapsed, dtype=np.float64)
    if np.isnan(elapsed).any() or (elapsed < 0).any():
        raise ValueError("elapsed: expected seconds >= 0 (not NaN)")
    p, elapsed = np.broadcast_arrays(p, elapsed)
    out = p.copy()
    inner = (p > 0) & (p < 1) & (elapsed > 0)  # elapsed == 0 keeps p exactly
    if inner.any():
        z = np.log(p[inner]) - np.log1p(-p[inner]) - elapsed[inner] / tau
        out[inner] = _expit(z)
    return out


def static_key(p, t_last, tau: float) -> np.ndarray:
    """The time-invariant eviction key ``logit(clip(p)) + t_last / tau`` (float64).

    Evicting the smallest key evicts the block with the smallest decayed continuation probability
    at any instant after ``t_last``. ``p == 0`` gives ``-inf``, ``p == 1`` gives ``+inf``; other
    values are clipped to ``[P_CLIP, 1 - P_CLIP]`` first.
    """
    tau = check_tau(tau)
    p = check_probability(p)
    t_last = np.asarray(t_last, dtype=np.float64)
    if np.isnan(t_last).any():
        raise ValueError("t_last: expected times in seconds, got NaN")
    clipped = np.clip(p, P_CLIP, 1.0 - P_CLIP)
    key = np.log(clipped) - np.log1p(-clipped) + t_last / tau
    key = np.where(p == 0.0, -np.inf, key)
    return np.where(p == 1.0, np.inf, key)
