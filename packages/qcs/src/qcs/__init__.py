"""Quadratic Coreset Selection: Certifying and Reconciling Sequence and Token Mining for Efficient Instruction Tuning (NeurIPS 2025)."""

from .ops import (
    HierarchicalBernoulliPolicy,
    QCSConfig,
    Selection,
    hierarchical_policy_gradient,
    per_token_loss,
    project_capped_simplex,
    token_weights,
    weighted_response_loss,
)
from .selector import QCSSelector

__all__ = [
    "HierarchicalBernoulliPolicy",
    "QCSConfig",
    "QCSSelector",
    "Selection",
    "hierarchical_policy_gradient",
    "per_token_loss",
    "project_capped_simplex",
    "token_weights",
    "weighted_response_loss",
]
