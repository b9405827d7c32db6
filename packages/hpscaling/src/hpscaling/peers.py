"""The peer a user would reach for instead of the law: a black-box search over log λ with optuna.

optuna is an optional dependency (``pip install hpscaling[peers]``); :func:`optuna_available` says
whether it is installed, and :func:`optuna_lambda_search` raises an ``ImportError`` naming the
extra when it is not.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from hpscaling.laws import check_positive

__all__ = ["optuna_available", "optuna_lambda_search"]

MISSING = "optuna is not installed: `pip install hpscaling[peers]` (or `uv sync --extra peers`)"


def optuna_available() -> bool:
    """Whether the optuna peer can run."""
    return importlib.util.find_spec("optuna") is not None


def optuna_lambda_search(
    objective: Callable[[float], float],
    n_trials: int,
    low: float,
    high: float,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """Minimise ``objective(λ)`` over log-uniform λ ∈ [low, high] with optuna's TPE sampler.

    With fewer trials than TPE's start-up count (10 by default) the proposals are TPE's seeded
    random start-up samples: the honest picture of what a small search budget buys.

    Args:
        objective: λ -> loss (a training run).
        n_trials: trials (>= 1).
        low, high: the search range, 0 < low < high.
        seed: the sampler's seed.

    Returns:
        ``[(λ, loss), ...]`` in trial order.
    """
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials: expected an int >= 1, got {n_trials!r}")
    lo, hi = check_positive("low", low), check_positive("high", high)
    if lo >= hi:
        raise ValueError(f"high: expected > low={lo}, got {hi}")
    if not callable(objective):
        raise TypeError(f"objective: expected a callable, got {type(objective).__name__}")
    if not optuna_available():
        raise ImportError(MISSING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    trials: list[tuple[float, float]] = []

    def wrapped(trial) -> float:
        lam = trial.suggest_float("lam", lo, hi, log=True)
        loss = float(objective(lam))
        trials.append((lam, loss))
        return loss

    study.optimize(wrapped, n_trials=n_trials)
    return trials
