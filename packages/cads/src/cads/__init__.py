"""Computational Budget Should Be Considered in Data Selection (NeurIPS 2025).

What exists so far: the compute budget and the penalty form's inner value (``budget``), the
selection policies and the Hessian-free policy-gradient estimator (``policies``), and the float64
least-squares reference with exact enumeration (``cads.reference``). The solvers
(``budgeted_train``, ``CADS``, ``BudgetedPBCS``) and the baselines are not built yet.
"""

from .budget import Budget, budget_min, fit_loglinear, penalty_values
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient

__all__ = [
    "BernoulliPolicy",
    "Budget",
    "TruncatedGaussianPolicy",
    "budget_min",
    "fit_loglinear",
    "penalty_values",
    "policy_gradient",
]
