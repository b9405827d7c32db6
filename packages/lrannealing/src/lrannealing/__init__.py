"""Scaling Law with Learning Rate Annealing (Tissue, Wang, Wang; NeurIPS 2025, arXiv 2408.11029).

L(s) = L₀ + A·S₁(s)^(−α) − C·S₂(s): S₁ the forward area (cumulative LR), S₂ the annealing area
(momentum-smoothed LR decreases). Fit on one or two runs, predict the whole loss curve of any
schedule, search schedules; the multi-power law and two simpler laws beside it as baselines.
"""

from lrannealing import schedules
from lrannealing.areas import DEFAULT_DECAY, areas, effective_lrs, s2_torch
from lrannealing.law import (
    DECAY_GRID,
    REFERENCE_GRID,
    Curve,
    FitResult,
    ForwardOnlyLaw,
    LRAnnealingLaw,
    MultiPowerLaw,
    StepPowerLaw,
    evaluate,
    fit,
)
from lrannealing.recorder import LossCurveRecorder
from lrannealing.search import ScheduleSearch, optimize_schedule

__all__ = [
    "DECAY_GRID",
    "DEFAULT_DECAY",
    "REFERENCE_GRID",
    "Curve",
    "FitResult",
    "ForwardOnlyLaw",
    "LRAnnealingLaw",
    "LossCurveRecorder",
    "MultiPowerLaw",
    "ScheduleSearch",
    "StepPowerLaw",
    "areas",
    "effective_lrs",
    "evaluate",
    "fit",
    "optimize_schedule",
    "s2_torch",
    "schedules",
]
