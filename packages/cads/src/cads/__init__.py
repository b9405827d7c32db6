"""Computational Budget Should Be Considered in Data Selection (NeurIPS 2025).

What exists so far: the compute budget and the penalty form's inner value (``budget``), the
selection policies and the Hessian-free policy-gradient estimator (``policies``), the outer loop
(``PolicyOptimizer``, ``BudgetedPBCS`` around a caller's value function), static rules as pure
functions (``cads.baselines``), the float64 least-squares reference (``cads.reference``) and
``budgeted_train`` (exactly B steps, probe curve) and ``CADSConfig``. The ``CADS`` solver and the model-training
value functions are not built yet.
"""

from .budget import Budget, budget_min, fit_loglinear, penalty_values
from .config import CADSConfig
from .outer import BudgetedPBCS, PolicyOptimizer
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient
from .train import budgeted_train

__all__ = [
    "BernoulliPolicy",
    "Budget",
    "BudgetedPBCS",
    "CADSConfig",
    "PolicyOptimizer",
    "TruncatedGaussianPolicy",
    "budget_min",
    "budgeted_train",
    "fit_loglinear",
    "penalty_values",
    "policy_gradient",
]
