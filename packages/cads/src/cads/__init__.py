"""Computational Budget Should Be Considered in Data Selection (NeurIPS 2025).

What exists so far: the compute budget and the penalty form's inner value (``budget``), the
selection policies and the Hessian-free policy-gradient estimator (``policies``), the outer loop
(``PolicyOptimizer``, ``BudgetedPBCS`` around a value function; ``TrainingValue`` trains a model
for it, ``inner="budget"|"converge"``), static rules as pure functions (``cads.baselines``), the
float64 least-squares reference (``cads.reference``), ``budgeted_train`` (exactly B steps, probe
curve) and ``train_to_convergence``, ``CADSConfig`` and the ``CADS`` solver (``value="exact"`` at
tau = 1 reduces to ``BudgetedPBCS``), the training runs behind EL2N, forgetting and the cleanlab
peer (``cads.baselines``), and the benchmark data (``cads.digits``, ``cads.language``,
``cads.experiment``; suite ``cads.bench``). ``CADS`` splits its rollouts across
``torch.distributed`` ranks. Not built: vmapped rollouts, the DSIR peer.
"""

from .budget import Budget, budget_min, fit_loglinear, penalty_values
from .config import CADSConfig
from .outer import BudgetedPBCS, PolicyOptimizer, TrainingValue
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient
from .solver import CADS, Selection
from .train import budgeted_train, train_to_convergence

__all__ = [
    "CADS",
    "BernoulliPolicy",
    "Budget",
    "BudgetedPBCS",
    "CADSConfig",
    "PolicyOptimizer",
    "Selection",
    "TrainingValue",
    "TruncatedGaussianPolicy",
    "budget_min",
    "budgeted_train",
    "fit_loglinear",
    "penalty_values",
    "policy_gradient",
    "train_to_convergence",
]
