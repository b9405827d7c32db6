"""Neural Block Linearization (NBL, NeurIPS 2025): replace attention sublayers by closed-form
LMMSE maps, chosen by a canonical-correlation error bound."""

from . import cca, lmmse, stats
from .cost import decode_cost
from .model import (
    DroppedAttention,
    LayerStats,
    LinearizedAttention,
    apply,
    apply_drop,
    calibrate,
    layer_reports,
    linearize,
    load,
    removed_parameters,
    save,
    select,
)
from .stats import CovAccumulator, CovStats

__all__ = [
    "CovAccumulator",
    "CovStats",
    "DroppedAttention",
    "LayerStats",
    "LinearizedAttention",
    "apply",
    "apply_drop",
    "calibrate",
    "cca",
    "decode_cost",
    "layer_reports",
    "linearize",
    "lmmse",
    "load",
    "removed_parameters",
    "save",
    "select",
    "stats",
]
