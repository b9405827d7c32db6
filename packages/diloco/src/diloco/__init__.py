"""DiLoCo (inner AdamW, outer Nesterov over torch.distributed) and its scaling laws (NeurIPS 2025).

Paper: *Communication-Efficient Language Model Training Scales Reliably and Robustly: Scaling Laws
for DiLoCo* (Charles et al., arXiv 2503.09799).
"""

from diloco.engine import (
    PAPER_OUTER_LR,
    ByteCounter,
    DiLoCo,
    DiLoCoConfig,
    paper_outer_lr,
    run_replicas,
    split_global_batch,
)
from diloco.reference import nesterov_outer_step, reference_diloco

__all__ = [
    "PAPER_OUTER_LR",
    "ByteCounter",
    "DiLoCo",
    "DiLoCoConfig",
    "nesterov_outer_step",
    "paper_outer_lr",
    "reference_diloco",
    "run_replicas",
    "split_global_batch",
]
