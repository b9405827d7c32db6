"""Architecture search (Model-Optimizer's Minitron defaults): enumerate width/depth candidates within
the pruning limits, keep those under the parameter budget, score the ``top_k`` closest to it."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable

import torch
from torch import nn

from hybridprune.importance import Importance
from hybridprune.prune import PruneTarget, _check_importance, _nemotron_only, count_params, prune

__all__ = ["search"]


def _axis(orig: int, divisor: int, max_pruning: float) -> list[int]:
    low = math.ceil((1 - max_pruning) * orig)
    vals = {v for v in range(divisor, orig + 1, divisor) if v >= low}
    vals.add(orig)
    return sorted(vals)


def _config_for(config, depth: torch.Tensor, t: PruneTarget):
    order = torch.sort(depth.double(), descending=True, stable=True).indices
    keep = sorted(order[: t.num_layers].tolist())
    new = copy.deepcopy(config)
    new.hidden_size = t.hidden_size
    new.intermediate_size = t.intermediate_size
    new.mamba_num_heads = t.mamba_num_heads
    new.mamba_head_dim = t.mamba_head_dim
    new.layers_block_type = [config.layers_block_type[i] for i in keep]
    return new


def search(
    model: nn.Module,
    importance: Importance,
    *,
    params: int | float,
    score_fn: Callable[[nn.Module], float],
    max_width_pruning: float = 0.4,
    max_depth_pruning: float = 0.2,
    top_k: int = 10,
    hidden_divisor: int = 8,
    ffn_divisor: int = 8,
    head_dim_divisor: int = 8,
    mamba_strategy: str = "group_aware",
) -> tuple[PruneTarget, list[dict]]:
    """Pick a ``PruneTarget`` for a ``NemotronHForCausalLM`` under a parameter budget.

    Axes: ``hidden_size``, ``intermediate_size`` (multiples of their divisors), ``mamba_num_heads``
    (multiples of ``n_groups``), ``mamba_head_dim`` (multiples of ``head_dim_divisor``; the official
    default is 8) and ``num_layers``; each keeps at least ``1 - max_width_pruning`` (width) or
    ``1 - max_depth_pruning`` (depth) of the teacher, and the teacher's own value is always a candidate.
    Attention heads are not searched. Every configuration whose exact parameter count
    (``count_params``) is at most ``params`` is a candidate; the ``top_k`` closest to the budget are
    pruned and scored by ``score_fn(student)`` (lower is better: a validation loss, or the loss
    after a short distillation as in the paper).

    Args:
        params: the budget, an absolute count (int) or a fraction of the teacher's count (float in (0, 1]).

    Returns:
        ``(best_target, table)``: the table lists every scored candidate (its target fields, ``params``
        and ``score``), best first.

    Raises:
        ValueError: ``params`` is out of range or no candidate meets it (naming ``params``).
    """
    _nemotron_only(model)
    _check_importance(model, importance)
    cfg = model.config
    if mamba_strategy not in ("group_aware", "none"):
        raise ValueError(
            f"mamba_strategy: expected 'group_aware' or 'none', got {mamba_strategy!r}"
        )
    if not callable(score_fn):
        raise TypeError(
            f"score_fn: expected a callable student -> float, got {type(score_fn).__name__}"
        )
    for name, v in (
        ("max_width_pruning", max_width_pruning),
        ("max_depth_pruning", max_depth_pruning),
    ):
        if not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ValueError(f"{name}: expected a number in [0, 1), got {v!r}")
    for name, v in (
        ("top_k", top_k),
        ("hidden_divisor", hidden_divisor),
        ("ffn_divisor", ffn_divisor),
        ("head_dim_divisor", head_dim_divisor),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
    full = count_params(cfg)
    if isinstance(params, float) and not isinstance(params, bool):
        if not 0 < params <= 1:
            raise ValueError(f"params: a fraction must be in (0, 1], got {params}")
        budget = int(params * full)
    elif isinstance(params, int) and not isinstance(params, bool) and params > 0:
        budget = params
    else:
        raise ValueError(f"params: expected an int > 0 or a fraction in (0, 1], got {params!r}")
    if budget > full:
        raise ValueError(f"params: the budget {budget} is above the model's {full} parameters")
    heads = (
        [cfg.mamba_num_heads]
        if mamba_strategy == "none"
        else _axis(cfg.mamba_num_heads, cfg.n_groups, max_width_pruning)
    )
    hdims = (
        [cfg.mamba_head_dim]
        if mamba_strategy == "none"
        else _axis(cfg.mamba_head_dim, head_dim_divisor, max_width_pruning)
    )
    grid = itertools.product(
        _axis(cfg.hidden_size, hidden_divisor, max_width_pruning),
        _axis(cfg.intermediate_size, ffn_divisor, max_width_pruning),
        heads,
        hdims,
        _axis(len(cfg.layers_block_type), 1, max_depth_pruning),
    )
    cands = []
    for hid, ffn, mh, md, nl in grid:
        t = PruneTarget(
            hidden_size=hid,
            intermediate_size=ffn,
            mamba_num_heads=mh,
            mamba_head_dim=md,
            num_layers=nl,
        )
        n = count_params(_config_for(cfg, importance.depth, t))
        if n <= budget:
            cands.append((n, t))
    if not cands:
        smallest = count_params(
            _config_for(
                cfg,
                importance.depth,
                PruneTarget(
                    hidden_size=_axis(cfg.hidden_size, hidden_divisor, max_width_pruning)[0],
                    intermediate_size=_axis(cfg.intermediate_size, ffn_divisor, max_width_pruning)[
                        0
                    ],
                    mamba_num_heads=heads[0],
                    mamba_head_dim=hdims[0],
                    num_layers=_axis(len(cfg.layers_block_type), 1, max_depth_pruning)[0],
                ),
            )
        )
        raise ValueError(
            f"params: no candidate within max_width_pruning={max_width_pruning} and max_depth_pruning="
            f"{max_depth_pruning} has at most {budget} parameters (the smallest has {smallest})"
        )
    cands.sort(key=lambda c: (-c[0], tuple(vars(c[1]).values())))
    table = []
    for n, t in cands[:top_k]:
        student = prune(model, importance, t, mamba_strategy=mamba_strategy)
        score = float(score_fn(student))
        table.append({**vars(t), "params": n, "score": score})
        del student
    table.sort(key=lambda r: r["score"])
    best = table[0]
    return PruneTarget(**{k: best[k] for k in vars(PruneTarget())}), table
