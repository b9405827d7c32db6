"""Computational Budget Should Be Considered in Data Selection (NeurIPS 2025).

What exists so far: the compute budget and the penalty form's inner value (``budget``), the
selection policies and the Hessian-free policy-gradient estimator (``policies``), the outer loop
(``PolicyOptimizer``, ``BudgetedPBCS`` around a caller's value function), static rules as pure
functions (``cads.baselines``), the float64 least-squares reference (``cads.reference``) and
``budgeted_train`` (exactly B steps, probe curve), ``CADSConfig`` and a first ``CADS`` solver
(runs end to end; its selection quality is not yet tested). Not built: the model-training value
function for ``BudgetedPBCS``, distributed rollouts, vmapped rollouts, the benchmarks.
"""

from .budget import Budget, budget_min, fit_loglinear, penalty_values
from .config import CADSConfig
from .outer import BudgetedPBCS, PolicyOptimizer
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient
from .solver import CADS, Selection
from .train import budgeted_train

__all__ = [
    "CADS",
    "BernoulliPolicy",
    "Budget",
    "BudgetedPBCS",
    "CADSConfig",
    "PolicyOptimizer",
    "Selection",
    "TruncatedGaussianPolicy",
    "budget_min",
    "budgeted_train",
    "fit_loglinear",
    "penalty_values",
    "policy_gradient",
]
