"""Learning-rate schedules as float64 arrays of length ``T + 1`` (the LR of optimizer steps 0..T).

Every schedule takes ``warmup`` (a linear ramp ``peak·(i+1)/warmup`` over steps ``0..warmup-1``)
and ends at step ``T``. Example:

    >>> from lrannealing.schedules import wsd
    >>> lrs = wsd(1000, 3e-3, decay_frac=0.2, shape="linear")
    >>> lrs.shape, float(lrs[0]), float(lrs[800]), float(lrs[-1])
    ((1001,), 0.003, 0.003, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lrannealing._checks import as_lrs, check_choice, check_int, check_positive

__all__ = ["constant", "cosine", "cyclic", "linear", "multistep", "rewarm", "wsd"]

WSD_SHAPES = ("cosine", "linear", "1-sqrt")


def _base(T, peak, min_lr, warmup):
    T = check_int(T, "T", 1)
    peak = check_positive(peak, "peak")
    min_lr = check_positive(min_lr, "min_lr", allow_zero=True)
    if min_lr > peak:
        raise ValueError(f"min_lr: expected <= peak={peak}, got {min_lr}")
    warmup = check_int(warmup, "warmup", 0)
    if warmup >= T:
        raise ValueError(f"warmup: expected < T={T}, got {warmup}")
    lrs = np.full(T + 1, peak, dtype=np.float64)
    if warmup:
        lrs[:warmup] = peak * np.arange(1, warmup + 1) / warmup
    return T, peak, min_lr, warmup, lrs


def _decay(progress: np.ndarray, shape: str) -> np.ndarray:
    """Fraction of the peak-to-min gap still left at ``progress`` ∈ [0, 1]."""
    if shape == "cosine":
        return 0.5 * (1.0 + np.cos(np.pi * progress))
    if shape == "linear":
        return 1.0 - progress
    return 1.0 - np.sqrt(progress)  # "1-sqrt"


def constant(T: int, peak: float, warmup: int = 0) -> np.ndarray:
    """Constant LR ``peak`` (after an optional linear warm-up)."""
    return _base(T, peak, 0.0, warmup)[-1]


def cosine(T: int, peak: float, min_lr: float = 0.0, warmup: int = 0) -> np.ndarray:
    """Cosine decay from ``peak`` after warm-up to ``min_lr`` at step ``T``."""
    T, peak, min_lr, warmup, lrs = _base(T, peak, min_lr, warmup)
    p = (np.arange(warmup, T + 1) - warmup) / (T - warmup)
    lrs[warmup:] = min_lr + (peak - min_lr) * _decay(p, "cosine")
    return lrs


def linear(T: int, peak: float, min_lr: float = 0.0, warmup: int = 0) -> np.ndarray:
    """Linear decay from ``peak`` after warm-up to ``min_lr`` at step ``T``."""
    T, peak, min_lr, warmup, lrs = _base(T, peak, min_lr, warmup)
    p = (np.arange(warmup, T + 1) - warmup) / (T - warmup)
    lrs[warmup:] = min_lr + (peak - min_lr) * _decay(p, "linear")
    return lrs


def wsd(
    T: int,
    peak: float,
    decay_frac: float = 0.2,
    shape: str = "cosine",
    min_lr: float = 0.0,
    warmup: int = 0,
) -> np.ndarray:
    """Warmup-stable-decay: constant ``peak``, then the last ``decay_frac·T`` steps decay to ``min_lr``.

    ``shape`` is ``"cosine"``, ``"linear"`` or ``"1-sqrt"`` (the cooldown's form).
    """
    check_choice(shape, "shape", WSD_SHAPES)
    T, peak, min_lr, warmup, lrs = _base(T, peak, min_lr, warmup)
    check_positive(decay_frac, "decay_frac")
    if decay_frac > 1:
        raise ValueError(f"decay_frac: expected a number in (0, 1], got {decay_frac}")
    length = max(1, round(decay_frac * T))
    start = max(warmup, T - length)
    p = (np.arange(start, T + 1) - start) / (T - start)
    lrs[start:] = min_lr + (peak - min_lr) * _decay(p, shape)
    return lrs


def multistep(
    T: int,
    peak: float,
    milestones: Sequence[float] = (0.8, 0.9),
    factors: Sequence[float] = (10**-0.5, 0.1),
    warmup: int = 0,
) -> np.ndarray:
    """Step decay: LR ``peak·factors[j]`` from step ``round(milestones[j]·T)`` on ("8-1-1" by default)."""
    T, peak, _, warmup, lrs = _base(T, peak, 0.0, warmup)
    if len(milestones) != len(factors):
        raise ValueError(
            f"factors: expected one factor per milestone ({len(milestones)}), got {len(factors)}"
        )
    previous = 0.0
    for m in milestones:
        if not (isinstance(m, (int, float)) and previous < m < 1):
            raise ValueError(
                f"milestones: expected increasing fractions in (0, 1), got {milestones}"
            )
        previous = m
    for m, f in zip(milestones, factors, strict=True):
        check_positive(f, "factors", allow_zero=True)
        lrs[max(warmup, round(m * T)) :] = peak * f
    return lrs


def cyclic(
    T: int, peak: float, cycles: int = 2, min_lr: float = 0.0, warmup: int = 0
) -> np.ndarray:
    """Smooth cyclic cosine: ``cycles`` full down-and-up periods between ``peak`` and ``min_lr``."""
    cycles = check_int(cycles, "cycles", 1)
    T, peak, min_lr, warmup, lrs = _base(T, peak, min_lr, warmup)
    p = (np.arange(warmup, T + 1) - warmup) / (T - warmup)
    lrs[warmup:] = min_lr + (peak - min_lr) * 0.5 * (1.0 + np.cos(2 * np.pi * cycles * p))
    return lrs


def rewarm(base, at: int, peak: float, warmup: int = 0, min_lr: float | None = None) -> np.ndarray:
    """Re-warm-up: ``base`` up to step ``at``, then a new warm-up to ``peak`` and a cosine to ``min_lr``.

    ``min_lr`` defaults to ``base``'s last LR. The result has ``base``'s length.
    """
    base = as_lrs(base, "base")
    T = base.size - 1
    at = check_int(at, "at", 1)
    if at >= T:
        raise ValueError(f"at: expected < {T} (the base schedule's last step), got {at}")
    min_lr = float(base[-1]) if min_lr is None else min_lr
    out = base.copy()
    out[at:] = cosine(T - at, peak, min_lr=min_lr, warmup=warmup)[: T + 1 - at]
    return out
