"""Selection rules of the simple baselines, as pure functions of given scores and features.

The inputs come from :mod:`qcs.scores` (per-example losses under a model) and :mod:`qcs.less`
(LoRA gradient features); these functions are the part of each baseline that decides what to keep.

* :func:`random_selection`: ``m`` indices uniformly without replacement.
* :func:`perplexity_selection`: lowest mean response loss, or a middle band around the median.
* :func:`ifd_scores` / :func:`ifd_selection`: IFD = ppl(y|x)/ppl(y) (Li et al., Cherry LLM); ratios
  ≥ 1 (the instruction does not help) are dropped, then the highest are kept.
* :func:`less_scores` / :func:`less_selection`: LESS ``matching.py`` semantics — checkpoint weights
  renormalised to sum 1, ``Σ_c η_c·⟨g_train, g_val⟩``, mean over each subtask's validation
  examples, max over subtasks, top ``m``.
* :func:`rho1_token_mask`: RHO-1 token selection, the top ``α`` fraction of excess loss
  ``ℓ_θ − ℓ_ref`` among the batch's real tokens.
"""

from __future__ import annotations

import math

import torch

from .ops import _check_int, _check_ratio, _check_tensor

__all__ = [
    "ifd_scores",
    "ifd_selection",
    "less_scores",
    "less_selection",
    "perplexity_selection",
    "random_selection",
    "rho1_token_mask",
]


def _check_budget(budget, n: int) -> int:
    _check_int(budget, "budget", 1)
    if budget > n:
        raise ValueError(f"budget: must be <= n = {n}, got {budget}")
    return budget


def _topk_sorted(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest scores (ties towards the lower index), returned sorted."""
    order = torch.sort(-scores, stable=True).indices[:k]
    return torch.sort(order).values


def random_selection(n: int, budget: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``budget`` distinct indices of ``range(n)`` drawn uniformly, sorted."""
    _check_int(n, "n", 1)
    _check_budget(budget, n)
    return torch.sort(torch.randperm(n, generator=generator)[:budget]).values


def perplexity_selection(
    mean_losses: torch.Tensor, budget: int, mode: str = "lowest"
) -> torch.Tensor:
    """Keep the ``budget`` sequences of lowest mean response loss, or those nearest the median.

    Args:
        mean_losses: ``[n]`` mean per-token response loss under the base model (log-perplexity).
        mode: ``"lowest"`` or ``"middle"`` (the band closest to the median).
    """
    _check_tensor(mean_losses, "mean_losses", ndim=1, floating=True)
    _check_budget(budget, mean_losses.numel())
    if not bool(torch.isfinite(mean_losses).all()):
        raise ValueError("mean_losses: contains NaN or Inf")
    if mode == "lowest":
        return _topk_sorted(-mean_losses, budget)
    if mode == "middle":
        return _topk_sorted(-(mean_losses - mean_losses.median()).abs(), budget)
    raise ValueError(f"mode: must be 'lowest' or 'middle', got {mode!r}")


def ifd_scores(loss_given_instruction: torch.Tensor, loss_alone: torch.Tensor) -> torch.Tensor:
    """IFD ``= ppl(y|x)/ppl(y) = exp(ℓ̄(y|x) − ℓ̄(y))`` from mean response losses ``[n]``."""
    _check_tensor(loss_given_instruction, "loss_given_instruction", ndim=1, floating=True)
    _check_tensor(loss_alone, "loss_alone", ndim=1, floating=True)
    if loss_alone.shape != loss_given_instruction.shape:
        raise ValueError(
            f"loss_alone: shape {tuple(loss_alone.shape)} differs from loss_given_instruction "
            f"{tuple(loss_given_instruction.shape)}"
        )
    return torch.exp(loss_given_instruction - loss_alone)


def ifd_selection(ifd: torch.Tensor, budget: int) -> torch.Tensor:
    """Drop IFD ≥ 1, keep the ``budget`` highest of the rest (fewer if fewer remain), sorted."""
    _check_tensor(ifd, "ifd", ndim=1, floating=True)
    _check_budget(budget, ifd.numel())
    valid = torch.isfinite(ifd) & (ifd < 1)
    key = torch.where(valid, ifd, torch.full_like(ifd, -math.inf))
    k = min(budget, int(valid.sum()))
    return _topk_sorted(key, k)


def less_scores(
    train_features: torch.Tensor,
    val_features: torch.Tensor,
    checkpoint_weights: torch.Tensor,
    val_subtask: torch.Tensor,
    normalize: bool = True,
) -> torch.Tensor:
    """LESS influence scores ``[n]``.

    Args:
        train_features: ``[C, n, d]`` projected (Adam-preconditioned) LoRA gradients per checkpoint.
        val_features: ``[C, V, d]`` projected SGD gradients of the target validation examples.
        checkpoint_weights: ``[C]`` (learning rates), renormalised to sum 1 as ``matching.py`` does.
        val_subtask: ``[V]`` integer subtask id of each validation example.
        normalize: L2-normalise the features first (LESS normalises when it collects them).
    """
    _check_tensor(train_features, "train_features", ndim=3, floating=True)
    _check_tensor(val_features, "val_features", ndim=3, floating=True)
    _check_tensor(checkpoint_weights, "checkpoint_weights", ndim=1, floating=True)
    _check_tensor(val_subtask, "val_subtask", ndim=1)
    C, _, d = train_features.shape
    if val_features.shape[0] != C or val_features.shape[2] != d:
        raise ValueError(
            f"val_features: shape {tuple(val_features.shape)} must be [C={C}, V, d={d}]"
        )
    if checkpoint_weights.shape != (C,) or bool((checkpoint_weights < 0).any()):
        raise ValueError(f"checkpoint_weights: expected {C} non-negative weights")
    if float(checkpoint_weights.sum()) <= 0:
        raise ValueError("checkpoint_weights: must not all be zero")
    if val_subtask.shape != (val_features.shape[1],) or val_subtask.is_floating_point():
        raise ValueError(f"val_subtask: expected {val_features.shape[1]} integer ids")
    tr, va = train_features, val_features
    if normalize:
        tr = torch.nn.functional.normalize(tr, dim=-1)
        va = torch.nn.functional.normalize(va, dim=-1)
    eta = checkpoint_weights / checkpoint_weights.sum()
    influence = torch.einsum("c,cnd,cvd->nv", eta.to(tr.dtype), tr, va)  # [n, V]
    tasks = torch.unique(val_subtask)
    per_task = torch.stack([influence[:, val_subtask == k].mean(-1) for k in tasks], -1)
    return per_task.max(-1).values


def less_selection(scores: torch.Tensor, budget: int) -> torch.Tensor:
    """Top ``budget`` by LESS score, sorted."""
    _check_tensor(scores, "scores", ndim=1, floating=True)
    _check_budget(budget, scores.numel())
    return _topk_sorted(scores, budget)


def rho1_token_mask(
    token_loss: torch.Tensor,
    reference_loss: torch.Tensor,
    token_mask: torch.Tensor,
    token_ratio: float,
) -> torch.Tensor:
    """RHO-1: keep the ``⌈α·#real⌉`` real tokens of highest excess loss ``ℓ_θ − ℓ_ref`` in the batch."""
    _check_tensor(token_loss, "token_loss", floating=True)
    _check_tensor(reference_loss, "reference_loss", floating=True)
    _check_tensor(token_mask, "token_mask")
    if reference_loss.shape != token_loss.shape:
        raise ValueError(
            f"reference_loss: shape {tuple(reference_loss.shape)} differs from token_loss "
            f"{tuple(token_loss.shape)}"
        )
    if token_mask.shape != token_loss.shape or token_mask.dtype != torch.bool:
        raise ValueError(f"token_mask: expected a bool tensor shaped {tuple(token_loss.shape)}")
    ratio = _check_ratio(token_ratio)
    excess = torch.where(
        token_mask, token_loss - reference_loss, torch.full_like(token_loss, -math.inf)
    )
    k = math.ceil(ratio * int(token_mask.sum()) - 1e-9)
    flat = excess.reshape(-1)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    keep[torch.sort(-flat, stable=True).indices[:k]] = True
    return keep.reshape(token_mask.shape) & token_mask
