"""DiZO: divergence-driven zeroth-order fine-tuning (Harmony in Divergence, NeurIPS 2025).

MeZO (seeded in-place SPSA) plus a learned, clipped per-layer rescaling of the accumulated update.
"""

from .analysis import divergence, divergence_cv
from .ops import displacement_norms, perturb_, project_
from .optim import DEFAULT_INCLUDE, DiZO, DiZOConfig, MeZO, MeZOConfig

__all__ = [
    "DEFAULT_INCLUDE",
    "DiZO",
    "DiZOConfig",
    "MeZO",
    "MeZOConfig",
    "displacement_norms",
    "divergence",
    "divergence_cv",
    "perturb_",
    "project_",
]
