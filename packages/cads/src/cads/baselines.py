"""Static selection rules (spec section 3): pure functions of training signals, and the training
runs that produce those signals.

* ``el2n_scores`` / ``forgetting_scores`` / ``keep_by_score``: the rules on precomputed signals;
* ``el2n_by_training``: EL2N's probabilities from ``runs`` budgeted trainings on all the data,
  stopped early; ``forgetting_by_training``: the correctness record of one budgeted run;
* ``out_of_fold_probs``: k-fold out-of-fold class probabilities, and ``cleanlab_selection``: drop
  what cleanlab's ``find_label_issues`` flags on them (the ``peers`` extra).

Every training run here is ``budgeted_train`` (or the same batch stream), from the caller's
common theta_0, with seeds drawn from the caller's generator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ._checks import check_float, check_generator, check_int, check_tensor
from .budget import Budget
from .train import _dataset, _selection, _step, budgeted_train

__all__ = [
    "cleanlab_selection",
    "el2n_by_training",
    "el2n_scores",
    "forgetting_by_training",
    "forgetting_scores",
    "full_data",
    "keep_by_score",
    "out_of_fold_probs",
    "random_subset",
]

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _seed(generator: torch.Generator) -> int:
    return int(torch.randint(2**62, (1,), generator=generator))


def _labels(dataset: object) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _dataset(dataset)
    if y.dtype not in (torch.int32, torch.int64) or y.ndim != 1:
        raise TypeError("dataset targets must be a 1-D int tensor of class labels")
    return x, y


def _fraction(fraction: object) -> float:
    fraction = check_float("fraction", fraction)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    return fraction


def _count(n: int, fraction: float) -> int:
    return max(1, round(fraction * n))


def full_data(n: int) -> torch.Tensor:
    """Every example (trained at the same budget as the other arms): indices [n]."""
    return torch.arange(check_int("n", n, low=1))


def random_subset(n: int, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random subset of round(fraction * n) (at least 1) indices, sorted."""
    n = check_int("n", n, low=1)
    k = _count(n, _fraction(fraction))
    return torch.randperm(n, generator=check_generator(generator))[:k].sort().values


def el2n_scores(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """EL2N (Paul et al. 2021): mean over runs of ||softmax - onehot||_2.

    ``probs`` [R, n, C] class probabilities from R runs at an early step, ``labels`` [n] int.
    """
    p = check_tensor("probs", probs, ndim=3)
    if not isinstance(labels, torch.Tensor) or labels.dtype not in (torch.int32, torch.int64):
        raise TypeError("labels must be an int32/int64 tensor")
    if labels.shape != (p.shape[1],):
        raise ValueError(f"labels must have shape [{p.shape[1]}], got {tuple(labels.shape)}")
    if labels.numel() and (labels.min() < 0 or labels.max() >= p.shape[2]):
        raise ValueError(f"labels must lie in [0, {p.shape[2]})")
    onehot = torch.nn.functional.one_hot(labels, p.shape[2]).to(p.dtype)
    return torch.linalg.vector_norm(p - onehot, dim=2).mean(0)


def forgetting_scores(correct: torch.Tensor) -> torch.Tensor:
    """Forgetting events (Toneva et al. 2019): correct -> incorrect transitions per example;
    examples never classified correctly score +inf. ``correct`` [T, n] bool over T checkpoints."""
    if not isinstance(correct, torch.Tensor) or correct.dtype != torch.bool:
        raise TypeError("correct must be a bool tensor")
    if correct.ndim != 2 or correct.shape[0] < 1:
        raise ValueError(f"correct must have shape [T >= 1, n], got {tuple(correct.shape)}")
    events = (correct[:-1] & ~correct[1:]).sum(0).double()
    return torch.where(correct.any(0), events, torch.full_like(events, float("inf")))


def keep_by_score(scores: torch.Tensor, fraction: float, keep: str = "lowest") -> torch.Tensor:
    """Indices of the round(fraction * n) lowest (``keep="lowest"``) or highest scores, sorted;
    ties broken by index (stable)."""
    s = check_tensor("scores", scores, ndim=1)
    k = _count(s.numel(), _fraction(fraction))
    if keep not in ("lowest", "highest"):
        raise ValueError(f"keep must be 'lowest' or 'highest', got {keep!r}")
    order = torch.sort(s, stable=True, descending=keep == "highest").indices
    return order[:k].sort().values


def el2n_by_training(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    budget: Budget,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    generator: torch.Generator,
    runs: int = 4,
    step: int | None = None,
    loss_fn: Loss = nn.functional.cross_entropy,
) -> torch.Tensor:
    """EL2N scores [n] from ``runs`` budgeted trainings on all the data, stopped at ``step``.

    ``step`` defaults to max(1, round(B / 10)): Paul et al. score at epoch 20 of 200, the same
    tenth of training, scaled here to the budget. Each run is ``budgeted_train`` for ``step`` steps
    with a seed drawn from ``generator``; ``model_factory`` builds the same theta_0, so the runs
    differ in batch order (Paul et al. also vary the initialisation).
    """
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
    check_generator(generator)
    x, y = _labels(dataset)
    runs = check_int("runs", runs, low=1)
    step = max(1, round(budget.steps / 10)) if step is None else check_int("step", step, low=1)
    if step > budget.steps:
        raise ValueError(f"step must be <= budget.steps = {budget.steps}, got {step}")
    probs = []
    for _ in range(runs):
        model, _ = budgeted_train(
            model_factory,
            (x, y),
            full_data(x.shape[0]),
            Budget(step, budget.batch_size),
            optimizer_factory,
            torch.Generator().manual_seed(_seed(generator)),
            loss_fn=loss_fn,
        )
        with torch.no_grad():
            probs.append(torch.softmax(model(x).double(), dim=-1))
    return el2n_scores(torch.stack(probs), y)


def forgetting_by_training(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    budget: Budget,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    generator: torch.Generator,
    every: int = 1,
    loss_fn: Loss = nn.functional.cross_entropy,
) -> torch.Tensor:
    """Forgetting scores [n] from one budgeted run of B steps on all the data.

    Every example's correctness is checked at step 0, every ``every`` steps and at B. Toneva et
    al. check an example when its minibatch is presented; checking every example at fixed steps
    counts the same transitions at a coarser grain. The run draws its batches exactly as
    ``budgeted_train`` does (one seed from ``generator``), so the model at step t is A_t (tested).
    """
    if not callable(model_factory) or not callable(optimizer_factory):
        raise TypeError("model_factory and optimizer_factory must be callable")
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
    check_generator(generator)
    x, y = _labels(dataset)
    every = check_int("every", every, low=1)
    pools, probs = _selection(full_data(x.shape[0]), x.shape[0], None)
    gen = torch.Generator().manual_seed(_seed(generator))
    model = model_factory()
    if not isinstance(model, nn.Module):
        raise TypeError("model_factory must return an nn.Module")
    optimizer = optimizer_factory(list(model.parameters()))

    def correct() -> torch.Tensor:
        with torch.no_grad():
            return model(x).argmax(-1) == y

    record = [correct()]
    with torch.enable_grad():
        model.train()
        for t in range(1, budget.steps + 1):
            _step(model, optimizer, x, y, pools, probs, budget.batch_size, gen, loss_fn)
            if t % every == 0 or t == budget.steps:
                record.append(correct())
    return forgetting_scores(torch.stack(record))


def out_of_fold_probs(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    budget: Budget,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    generator: torch.Generator,
    folds: int = 5,
    loss_fn: Loss = nn.functional.cross_entropy,
) -> torch.Tensor:
    """Out-of-fold class probabilities [n, C] (float64): the examples are split at random into
    ``folds`` folds; each fold is predicted by a model trained with ``budgeted_train`` for
    ``budget`` on the other folds (one seed per fold from ``generator``)."""
    check_generator(generator)
    x, y = _labels(dataset)
    n = x.shape[0]
    folds = check_int("folds", folds, low=2)
    if folds > n:
        raise ValueError(f"folds must be <= the number of examples {n}, got {folds}")
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
    fold_of = torch.empty(n, dtype=torch.long)
    fold_of[torch.randperm(n, generator=generator)] = torch.arange(n) % folds
    out = None
    for f in range(folds):
        model, _ = budgeted_train(
            model_factory,
            (x, y),
            fold_of != f,
            budget,
            optimizer_factory,
            torch.Generator().manual_seed(_seed(generator)),
            loss_fn=loss_fn,
        )
        held = (fold_of == f).nonzero().squeeze(1)
        with torch.no_grad():
            p = torch.softmax(model(x[held]).double(), dim=-1)
        if out is None:
            out = torch.full((n, p.shape[1]), float("nan"), dtype=torch.float64)
        out[held] = p
    return out


def cleanlab_selection(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    budget: Budget,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    generator: torch.Generator,
    folds: int = 5,
    loss_fn: Loss = nn.functional.cross_entropy,
) -> torch.Tensor:
    """The usual noisy-label fix: indices [m] of the examples that cleanlab's
    ``filter.find_label_issues`` does not flag on ``folds``-fold out-of-fold probabilities.

    Needs the ``peers`` extra (``cleanlab``); raises ImportError naming it when absent.
    """
    try:
        from cleanlab.filter import find_label_issues
    except ImportError as err:
        raise ImportError(
            "cleanlab_selection needs cleanlab (pip install 'cads[peers]' or pip install cleanlab)"
        ) from err
    x, y = _labels(dataset)
    probs = out_of_fold_probs(
        model_factory, (x, y), budget, optimizer_factory, generator, folds, loss_fn
    )
    issues = find_label_issues(labels=y.numpy(), pred_probs=probs.numpy())
    keep = (~torch.as_tensor(issues)).nonzero().squeeze(1)
    return keep if keep.numel() else full_data(x.shape[0])
