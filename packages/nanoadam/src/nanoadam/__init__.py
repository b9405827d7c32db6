"""Pay Attention to Small Weights (NanoAdam) (NeurIPS 2025): sparse Adam on the smallest weights."""

from .groups import DEFAULT_EXCLUDE, param_groups
from .ops import sparse_adam_step, sparse_adam_step_multi
from .optimizer import NanoAdam, select_indices
from .reference import masked_adam_reference, select_reference

__all__ = [
    "DEFAULT_EXCLUDE",
    "NanoAdam",
    "masked_adam_reference",
    "param_groups",
    "select_indices",
    "select_reference",
    "sparse_adam_step",
    "sparse_adam_step_multi",
]
