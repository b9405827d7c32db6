"""Training integration: set AdamW's weight decay from a timescale, per parameter group.

:func:`apply_timescale` writes λ = B/(η_group·τ·D) into each decayed group of a
``torch.optim.AdamW`` (coupled decay: AdamW multiplies θ by 1 − η·λ per step), so every group
gets the same timescale even when μP gives groups different learning rates. With
``decay="independent"`` (an optimizer that multiplies θ by 1 − λ per step, without η) it writes
λ = B/(τ·D). Under DDP or FSDP2 the batch that counts is the global one: pass the per-rank batch
as ``per_rank_B`` and the world size is read from the process group.

Example (CPU):

    >>> import torch
    >>> from hpscaling.optim import apply_timescale, decay_exempt
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    >>> opt = torch.optim.AdamW(decay_exempt(model), lr=1e-3)
    >>> apply_timescale(opt, tau=0.2, B=1024, D=1_000_000)
    [5.12, 0.0]
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from hpscaling.laws import check_positive

__all__ = ["DECAYS", "apply_timescale", "decay_exempt", "global_batch"]

DECAYS = ("coupled", "independent")

#: The key a parameter group carries to be left out by :func:`apply_timescale`.
EXEMPT_KEY = "hpscaling_exempt"


def decay_exempt(
    model: nn.Module, weight_decay: float = 0.0, exempt_embeddings: bool = False
) -> list[dict[str, Any]]:
    """The usual two parameter groups: decayed matrices, and exempt norms, biases (and embeddings).

    A parameter is exempt when it has fewer than 2 dimensions (biases, norm gains) or, with
    ``exempt_embeddings``, belongs to an ``nn.Embedding``. The exempt group is marked so that
    :func:`apply_timescale` leaves its ``weight_decay`` at 0.

    Args:
        model: the module whose trainable parameters are split.
        weight_decay: the starting λ of the decayed group (``apply_timescale`` overwrites it).
        exempt_embeddings: also exempt embedding tables.

    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": exempt,
        "weight_decay": 0.0, "hpscaling_exempt": True}]`` for an optimizer constructor.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    check_positive("weight_decay", weight_decay, allow_zero=True)
    embedding_ids = set()
    if exempt_embeddings:
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                embedding_ids.update(id(p) for p in module.parameters())
    decayed, exempt = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (exempt if p.ndim < 2 or id(p) in embedding_ids else decayed).append(p)
    if not decayed and not exempt:
        raise ValueError("model: no parameter requires grad")
    return [
        {"params": decayed, "weight_decay": float(weight_decay)},
        {"params": exempt, "weight_decay": 0.0, EXEMPT_KEY: True},
    ]


def global_batch(per_rank_B: float, accumulation: int = 1, group: Any = None) -> float:
    """The global batch: per-rank batch × world size (from the process group) × accumulation.

    Without an initialised ``torch.distributed`` process group the world size is 1.
    """
    b = check_positive("per_rank_B", per_rank_B)
    if isinstance(accumulation, bool) or not isinstance(accumulation, int) or accumulation < 1:
        raise ValueError(f"accumulation: expected an int >= 1, got {accumulation!r}")
    world = 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world = torch.distributed.get_world_size(group)
    return b * world * accumulation


def apply_timescale(
    optimizer: torch.optim.Optimizer,
    tau: float,
    B: float | None = None,
    D: float | None = None,
    decay: str = "coupled",
    *,
    per_rank_B: float | None = None,
    accumulation: int = 1,
    group: Any = None,
    base_lr: float | None = None,
) -> list[float]:
    """Set each decayed group's ``weight_decay`` so that its AdamW timescale is ``tau``.

    Args:
        optimizer: an optimizer whose groups have ``lr`` and ``weight_decay`` (AdamW).
        tau: the timescale as a fraction of training (> 0).
        B: the global batch in tokens (> 0); or give ``per_rank_B`` instead.
        D: training tokens (> 0), same unit as B.
        decay: ``"coupled"`` (PyTorch/optax AdamW: θ·(1 − ηλ) per step; λ = B/(η·τ·D)) or
            ``"independent"`` (θ·(1 − λ) per step; λ = B/(τ·D)).
        per_rank_B: the batch one rank sees per micro-step, in tokens; the global batch is
            ``per_rank_B × world size × accumulation`` (read from ``group``).
        accumulation: gradient-accumulation micro-steps per optimizer step.
        group: the process group (default: the world).
        base_lr: use this η for every group (the paper's convention: τ from the base μP LR)
            instead of each group's own peak LR (``initial_lr`` when a scheduler set it, else
            ``lr``); with per-group LRs the default gives every group the same timescale.

    Groups marked by :func:`decay_exempt` (or with ``hpscaling_exempt=True``) are left alone.

    Returns:
        The ``weight_decay`` of each group, in group order.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    t = check_positive("tau", tau)
    if decay not in DECAYS:
        raise ValueError(f"decay: expected one of {DECAYS}, got {decay!r}")
    if (B is None) == (per_rank_B is None):
        raise ValueError("B: give exactly one of B (global, tokens) or per_rank_B")
    if D is None:
        raise ValueError("D: the training tokens are required")
    d = check_positive("D", D)
    if B is not None:
        b = check_positive("B", B)
        if accumulation != 1:
            raise ValueError("accumulation: only used with per_rank_B (B is already global)")
    else:
        b = global_batch(per_rank_B, accumulation, group)
    base = None if base_lr is None else check_positive("base_lr", base_lr)
    for i, g in enumerate(optimizer.param_groups):
        missing = [k for k in ("lr", "weight_decay") if k not in g]
        if missing:
            raise ValueError(
                f"optimizer: param_groups[{i}] has no {missing}; apply_timescale needs AdamW-style "
                "groups with 'lr' and 'weight_decay'"
            )
    values = []
    new = []
    for i, g in enumerate(optimizer.param_groups):
        if g.get(EXEMPT_KEY, False):
            new.append(None)
            continue
        if decay == "independent":
            new.append(b / (t * d))
            continue
        lr = base if base is not None else g.get("initial_lr", g["lr"])
        lr = float(lr.item()) if isinstance(lr, torch.Tensor) else float(lr)
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"optimizer: param_groups[{i}]['lr'] must be > 0, got {lr}")
        new.append(b / (lr * t * d))
    for g, wd in zip(optimizer.param_groups, new, strict=True):
        if wd is not None:
            g["weight_decay"] = wd
        values.append(float(g["weight_decay"]))
    return values
