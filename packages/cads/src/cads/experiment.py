"""The digits experiment behind the ``cads`` benchmark suite (spec section 5, vision stand-in).

``select(arm, ...)`` turns one arm's rule into a selection (indices, a bool mask or source
weights) and ``deploy`` trains a fresh model on it for exactly B steps (``budgeted_train``) and
measures validation and test accuracy. Every arm of one seed deploys with the same theta_0 and the
same batch seed (paired comparisons). Arms:

* ``full``: every example at the same budget; ``random_10|30|50``: a uniform random subset;
* ``el2n_low`` / ``el2n_high``: keep the half with the lowest / highest EL2N (4 runs, B/10 steps);
* ``forgetting``: keep the half most often forgotten in one B-step run (never learned first);
* ``cleanlab`` (peer): drop what ``find_label_issues`` flags on 5-fold out-of-fold probabilities
  of models trained for ``score_steps`` steps (B-independent, computed once per seed);
* ``pbcs``: ``BudgetedPBCS`` with ``TrainingValue(inner="budget")``; ``cads_e`` / ``cads_s``:
  the penalty solver, per example / per source. Masks are thresholded at s >= 0.5 (the top half
  by s if that is empty).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from ._checks import check_int
from .baselines import (
    cleanlab_selection,
    el2n_by_training,
    forgetting_by_training,
    full_data,
    keep_by_score,
    random_subset,
)
from .budget import Budget
from .config import CADSConfig
from .digits import NoisyDigits
from .outer import BudgetedPBCS, TrainingValue
from .policies import BernoulliPolicy
from .solver import CADS
from .train import budgeted_train, default_optimizer

__all__ = [
    "ARMS",
    "SEARCHED",
    "STATIC",
    "accuracy",
    "deploy",
    "deploy_mask",
    "mean_ci",
    "select",
    "timed_select",
]

#: Every arm of the digits experiment, in report order.
ARMS = (
    "full",
    "random_10",
    "random_30",
    "random_50",
    "el2n_low",
    "el2n_high",
    "forgetting",
    "cleanlab",
    "pbcs",
    "cads_e",
    "cads_s",
)
#: The simple static rules among which the strongest baseline is chosen (by validation accuracy).
STATIC = ("full", "random_10", "random_30", "random_50", "el2n_low", "el2n_high", "forgetting")
#: The arms that search a selection with the budgeted inner loop.
SEARCHED = ("pbcs", "cads_e", "cads_s")

BATCH = 32
Factory = Callable[[], nn.Module]


def accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    with torch.no_grad():
        return (model(data[0]).argmax(-1) == data[1]).double().mean().item()


def deploy_mask(s: torch.Tensor) -> torch.Tensor:
    """s >= 0.5, or the top half by s when nothing reaches 0.5."""
    mask = s >= 0.5
    if not mask.any():
        mask = torch.zeros_like(mask)
        mask[torch.topk(s, max(1, s.numel() // 2)).indices] = True
    return mask


def deploy(
    factory: Factory,
    data: NoisyDigits,
    selection: torch.Tensor,
    steps: int,
    seed: int,
) -> dict[str, float]:
    """Train a fresh model on ``selection`` for exactly ``steps`` steps; validation/test accuracy."""
    model, _ = budgeted_train(
        factory,
        data.train,
        selection,
        Budget(steps, BATCH),
        default_optimizer,
        torch.Generator().manual_seed(seed),
        sources=data.sources if selection.is_floating_point() else None,
    )
    return {"val_acc": accuracy(model, data.val), "test_acc": accuracy(model, data.test)}


def select(
    arm: str,
    factory: Factory,
    data: NoisyDigits,
    steps: int,
    seed: int,
    outer_steps: int,
    pbcs_outer_steps: int,
    score_steps: int,
    cache: dict | None = None,
) -> torch.Tensor:
    """The selection of ``arm`` at budget ``steps`` (see the module docstring). ``cache`` holds
    B-independent selections (cleanlab) across budgets of one seed."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    steps = check_int("steps", steps, low=1)
    n = data.x.shape[0]
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0) * 7919 + steps)
    budget = Budget(steps, BATCH)
    if arm == "full":
        return full_data(n)
    if arm.startswith("random_"):
        return random_subset(n, int(arm.split("_")[1]) / 100, gen)
    if arm.startswith("el2n_"):
        scores = el2n_by_training(factory, data.train, budget, default_optimizer, gen)
        return keep_by_score(scores, 0.5, keep="lowest" if arm == "el2n_low" else "highest")
    if arm == "forgetting":
        scores = forgetting_by_training(
            factory, data.train, budget, default_optimizer, gen, every=max(1, steps // 100)
        )
        return keep_by_score(scores, 0.5, keep="highest")
    if arm == "cleanlab":
        key = ("cleanlab", seed)
        if cache is not None and key in cache:
            return cache[key]
        keep = cleanlab_selection(
            factory, data.train, Budget(score_steps, BATCH), default_optimizer, gen
        )
        if cache is not None:
            cache[key] = keep
        return keep
    if arm == "pbcs":
        value = TrainingValue(factory, nn.functional.cross_entropy, data.train, data.val, budget)
        policy = BernoulliPolicy(n)
        BudgetedPBCS(value, policy, outer_steps=pbcs_outer_steps, rollouts=4).fit(gen)
        return deploy_mask(policy.s)
    granularity = "example" if arm == "cads_e" else "source"
    config = CADSConfig(budget, outer_steps=outer_steps, granularity=granularity)
    sel = CADS(
        factory,
        nn.functional.cross_entropy,
        data.train,
        data.val,
        config,
        sources=data.sources if granularity == "source" else None,
    ).fit(gen)
    return deploy_mask(sel.param) if granularity == "example" else sel.weights


def timed_select(*args, **kwargs) -> tuple[torch.Tensor, float]:
    """``select`` and its CPU seconds (process time)."""
    start = time.process_time()
    selection = select(*args, **kwargs)
    return selection, time.process_time() - start


def mean_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and the Student-t half-width of its ``confidence`` interval (0 for one value).

    >>> m, h = mean_ci([0.5, 0.6, 0.7])
    >>> round(m, 3), round(h, 3)
    (0.6, 0.248)
    """
    from scipy import stats

    values = [float(v) for v in values]
    if not values:
        raise ValueError("values must hold at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    sem = statistics.stdev(values) / len(values) ** 0.5
    return mean, float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * sem)
