"""PD-SSM: state-space models with sparse transitions ``A_t = P_t·D_t`` (NeurIPS 2025).

Structured Sparse Transition Matrices to Enable State Tracking in State-Space Models, Terzić et al.,
arXiv 2509.22284. ``pd_scan`` runs the recurrence (sequential, parallel, dense and Triton
backends with one custom backward); ``PDSSMLayer``/``PDSSM`` are the model; ``pdssm.tasks``
generates the state-tracking and formal-language tasks.
"""

from . import tasks
from .layer import PDSSM, PDSSMLayer
from .ops import pd_scan

__all__ = ["PDSSM", "PDSSMLayer", "pd_scan", "tasks"]
