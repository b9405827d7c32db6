"""Schedule search: the schedule of a family with the lowest predicted final loss under a fitted law.

Example (CPU):

    >>> from lrannealing import LRAnnealingLaw
    >>> from lrannealing.search import optimize_schedule
    >>> law = LRAnnealingLaw(L0=2.0, A=0.5, C=0.3, alpha=0.5)
    >>> best = optimize_schedule(law, T=4000, peak=1e-3, family="wsd")
    >>> best.params["shape"] in ("cosine", "linear", "1-sqrt"), best.lrs.shape
    (True, (4001,))
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from lrannealing import schedules
from lrannealing._checks import check_choice, check_int, check_positive

__all__ = ["ScheduleSearch", "optimize_schedule"]

FAMILIES = ("wsd", "cosine", "linear", "multistep")


@dataclasses.dataclass
class ScheduleSearch:
    """The best schedule found: its parameters, LRs, predicted final loss, and every candidate."""

    params: dict[str, Any]
    lrs: np.ndarray
    final_loss: float
    candidates: list[dict[str, Any]]


def _candidates(family, T, peak, warmup, decay_fracs, shapes, min_lr_ratios, milestones):
    if family == "wsd":
        for frac, shape, ratio in itertools.product(decay_fracs, shapes, min_lr_ratios):
            p = {"decay_frac": float(frac), "shape": shape, "min_lr": peak * float(ratio)}
            yield p, schedules.wsd(T, peak, warmup=warmup, **p)
    elif family in ("cosine", "linear"):
        build = getattr(schedules, family)
        for ratio in min_lr_ratios:
            p = {"min_lr": peak * float(ratio)}
            yield p, build(T, peak, warmup=warmup, **p)
    else:  # multistep: the first milestone scanned, the 8-1-1 factors kept
        for first in milestones:
            second = (1.0 + first) / 2
            p = {"milestones": (float(first), second)}
            yield p, schedules.multistep(T, peak, warmup=warmup, **p)


def optimize_schedule(
    law,
    T: int,
    peak: float,
    family: str = "wsd",
    warmup: int = 0,
    decay_fracs: Sequence[float] = tuple(np.round(np.linspace(0.05, 1.0, 20), 2)),
    shapes: Sequence[str] = schedules.WSD_SHAPES,
    min_lr_ratios: Sequence[float] = (0.0, 0.01, 0.1),
    milestones: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.9),
) -> ScheduleSearch:
    """Scan a schedule family on a grid and return the lowest predicted loss at step ``T``.

    Args:
        law: any fitted law of this package (``LRAnnealingLaw``, ``MultiPowerLaw``, ...).
        T: the run length; ``peak``: the peak LR (fixed: the law extrapolates in the schedule's
            shape, not in its peak, which it was not fitted across).
        family: ``"wsd"`` (decay fraction × shape × final LR), ``"cosine"``/``"linear"`` (final
            LR) or ``"multistep"`` (first milestone).
        warmup: warm-up steps of every candidate (counted as the peak by the law, by default).

    Returns:
        A :class:`ScheduleSearch`.
    """
    if not hasattr(law, "predict"):
        raise TypeError(f"law: expected a fitted law with .predict, got {type(law).__name__}")
    T = check_int(T, "T", 1)
    peak = check_positive(peak, "peak")
    check_choice(family, "family", FAMILIES)
    for s in shapes:
        check_choice(s, "shapes", schedules.WSD_SHAPES)
    rows = []
    best = None
    for params, lrs in _candidates(
        family, T, peak, warmup, decay_fracs, shapes, min_lr_ratios, milestones
    ):
        final = float(law.predict(lrs, [T], warmup_steps=warmup)[0])
        rows.append({**params, "final_loss": final})
        if best is None or final < best[0]:
            best = (final, params, lrs)
    if best is None:
        raise ValueError("family: the grid is empty (no candidate schedule)")
    return ScheduleSearch(params=best[1], lrs=best[2], final_loss=best[0], candidates=rows)
