"""Static selection rules, as pure functions of precomputed training signals (spec section 3).

The training runs that produce the signals (EL2N's early-step probabilities over 4 runs, the
per-step correctness record for forgetting) need ``budgeted_train``, which is not built yet.
"""

from __future__ import annotations

import torch

from ._checks import check_float, check_generator, check_int, check_tensor

__all__ = ["el2n_scores", "forgetting_scores", "full_data", "keep_by_score", "random_subset"]


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
