"""Vectorised rollouts for tiny models: K budgeted trainings as one ``torch.func.vmap`` over
stacked parameters (``CADSConfig(vectorize=True)``).

:func:`budgeted_train_vmapped` trains K copies of ``model_factory()`` on K selections with the
batches ``budgeted_train`` would draw: rollout k's batch indices come from its own
``torch.Generator().manual_seed(seeds[k])`` in the same order (source, then examples), and its
probe batch from the same fork (``train._probe_batch``). The parameters are stacked into [K, ...]
leaves; one step is ``vmap(functional_call)`` over them, the sum of the K losses backpropagated
(rollout k's slice of the gradient is exactly its own loss's gradient) and one optimizer step on
the stacked leaves. That equals K optimizers only for optimizers whose update is elementwise in
the parameters: SGD (momentum, weight decay, Nesterov), Adam and AdamW are accepted, others are
refused. Models whose forward pass changes buffers (batch norm running statistics) or draws
random numbers (dropout with p > 0) are refused too: vmap cannot reproduce the loop there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ._checks import check_int
from .budget import Budget
from .train import _checkpoint_ticks, _dataset, _probe_batch, _selection

__all__ = ["ELEMENTWISE_OPTIMIZERS", "budgeted_train_vmapped", "check_vmappable"]

#: Optimizers whose update of each parameter entry depends only on that entry's history, so one
#: optimizer over stacked [K, ...] parameters equals K optimizers.
ELEMENTWISE_OPTIMIZERS = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)


def check_vmappable(model: nn.Module) -> None:
    """Raise a ValueError naming ``model_factory`` if ``model`` cannot be trained under vmap with
    the loop's values (batch norm running statistics, dropout with p > 0)."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            raise ValueError(
                f"model_factory: vectorize=True cannot train {type(m).__name__} at {name!r} "
                "(its running statistics are buffers the forward pass changes); use "
                "vectorize=False"
            )
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            raise ValueError(
                f"model_factory: vectorize=True cannot reproduce the loop's dropout at {name!r} "
                f"(p = {m.p}); use vectorize=False"
            )


def _draws(
    pools: list[torch.Tensor], probs: torch.Tensor, steps: int, batch_size: int, seed: int
) -> tuple[torch.Tensor, torch.Generator]:
    """The batch indices [steps, batch_size] ``budgeted_train`` draws from this seed."""
    gen = torch.Generator().manual_seed(seed)
    start = torch.Generator().manual_seed(0)
    start.set_state(gen.get_state())
    out = torch.empty(steps, batch_size, dtype=torch.long)
    for t in range(steps):
        g = 0 if len(pools) == 1 else int(torch.multinomial(probs, 1, generator=gen))
        pool = pools[g]
        out[t] = pool[torch.randint(pool.numel(), (batch_size,), generator=gen)]
    return out, start


def budgeted_train_vmapped(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    selections: list[torch.Tensor],
    budget: Budget,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    seeds: list[int],
    checkpoints: list[int] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy,
    sources: torch.Tensor | None = None,
    eval_set: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[list[tuple[torch.Tensor, torch.Tensor] | None], torch.Tensor | None]:
    """``budgeted_train`` of K selections at once; rollout k uses
    ``torch.Generator().manual_seed(seeds[k])``.

    Returns ``(curves, eval_losses)``: rollout k's probe curve (as ``budgeted_train`` returns
    it; None without ``checkpoints``) and, with ``eval_set``, the K trained models' mean
    ``loss_fn`` on it ([K] float64).

    Raises:
        ValueError: the model or optimizer cannot be vectorised (names ``model_factory`` /
            ``optimizer_factory``), or the usual ``budgeted_train`` errors.
    """
    from torch.func import functional_call, vmap

    if not callable(model_factory):
        raise TypeError("model_factory must be callable")
    if not callable(optimizer_factory):
        raise TypeError("optimizer_factory must be callable")
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
    if not isinstance(selections, (list, tuple)) or not selections:
        raise TypeError("selections must be a non-empty list of selections")
    if not isinstance(seeds, (list, tuple)) or len(seeds) != len(selections):
        raise ValueError(f"seeds must be a list of {len(selections)} ints (one per selection)")
    seeds = [check_int("seeds", s, low=0) for s in seeds]
    x, y = _dataset(dataset)
    ticks = _checkpoint_ticks(checkpoints, budget)
    model = model_factory()
    if not isinstance(model, nn.Module):
        raise TypeError("model_factory must return an nn.Module")
    check_vmappable(model)
    K = len(selections)
    names = [n for n, _ in model.named_parameters()]
    params = {
        n: torch.stack([p.detach()] * K).clone().requires_grad_(True)
        for n, p in model.named_parameters()
    }
    buffers = dict(model.named_buffers())
    optimizer = optimizer_factory([params[n] for n in names])
    if type(optimizer) not in ELEMENTWISE_OPTIMIZERS:
        raise ValueError(
            "optimizer_factory: vectorize=True supports "
            f"{', '.join(o.__name__ for o in ELEMENTWISE_OPTIMIZERS)} (elementwise updates, "
            f"tested equal to the loop), got {type(optimizer).__name__}; use vectorize=False"
        )

    batches, probes = [], []
    for sel, seed in zip(selections, seeds, strict=True):
        pools, probs = _selection(sel, x.shape[0], sources)
        idx, start = _draws(pools, probs, budget.steps, budget.batch_size, seed)
        batches.append(idx)
        if checkpoints is not None:
            probes.append(_probe_batch(pools, probs, budget.batch_size, start))
    batches_t = torch.stack(batches, dim=1)  # [steps, K, batch]

    def loss_of(p: dict, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return loss_fn(functional_call(model, (p, buffers), (xb,)), yb)

    batched = vmap(loss_of)
    probe_idx = torch.stack(probes) if probes else None
    curves_loss: list[list[float]] = [[] for _ in range(K)]
    curve_t: list[int] = []

    def record(t: int) -> None:
        with torch.no_grad():
            losses = batched(params, x[probe_idx], y[probe_idx])
        curve_t.append(t)
        for k in range(K):
            curves_loss[k].append(losses[k].item())

    with torch.enable_grad():
        model.train()
        tick = 0
        while tick < len(ticks) and ticks[tick] == 0:
            record(0)
            tick += 1
        for step in range(budget.steps):
            b = batches_t[step]
            optimizer.zero_grad(set_to_none=True)
            try:
                batched(params, x[b], y[b]).sum().backward()
            except RuntimeError as err:
                raise ValueError(
                    f"model_factory: the model cannot run under torch.func.vmap ({err}); "
                    "use vectorize=False"
                ) from err
            optimizer.step()
            while tick < len(ticks) and ticks[tick] == step + 1:
                record(step + 1)
                tick += 1
    curves: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * K
    if checkpoints is not None:
        t = torch.tensor(curve_t, dtype=torch.float64)
        curves = [(t.clone(), torch.tensor(c, dtype=torch.float64)) for c in curves_loss]
    evals = None
    if eval_set is not None:
        xe, ye = _dataset(eval_set)
        with torch.no_grad():
            evals = vmap(loss_of, in_dims=(0, None, None))(params, xe, ye).double()
    return curves, evals
