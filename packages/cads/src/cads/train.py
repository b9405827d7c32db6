"""Budgeted training A_B(m): exactly B optimizer steps at a fixed batch size, batches drawn
uniformly (with replacement) from the selected examples, whatever the subset size (spec section 2).
A small subset is simply seen for more epochs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ._checks import check_generator, check_int
from .budget import Budget

__all__ = ["budgeted_train", "default_optimizer", "train_to_convergence"]

_PROBE_SIZE = 256


def default_optimizer(params: list) -> torch.optim.Optimizer:
    """The inner optimizer when none is given: SGD, lr 0.05, momentum 0.9 (spec section 5)."""
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _dataset(dataset: object) -> tuple[torch.Tensor, torch.Tensor]:
    if (
        not isinstance(dataset, (tuple, list))
        or len(dataset) != 2
        or not all(isinstance(t, torch.Tensor) for t in dataset)
    ):
        raise TypeError("dataset must be a pair of tensors (inputs, targets)")
    x, y = dataset
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(
            f"dataset inputs and targets must share a non-zero first dimension, got {x.shape[0]} and {y.shape[0]}"
        )
    return x, y


def _selection(
    selection: object, n: int, sources: torch.Tensor | None
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Pools of indices and the probability of drawing each pool's batch."""
    if not isinstance(selection, torch.Tensor):
        raise TypeError(
            f"selection must be a tensor (indices, a bool mask or source weights), got {type(selection).__name__}"
        )
    if selection.dtype == torch.bool:
        if selection.shape != (n,):
            raise ValueError(f"selection mask must have shape [{n}], got {tuple(selection.shape)}")
        idx = selection.nonzero().squeeze(1)
    elif not selection.is_floating_point():
        if selection.ndim != 1:
            raise ValueError("selection indices must be 1-D")
        if selection.numel() and (selection.min() < 0 or selection.max() >= n):
            raise ValueError(f"selection indices must lie in [0, {n})")
        idx = selection.long()
    else:
        if sources is None:
            raise ValueError(
                "selection holds source weights, so sources (a source id per example) is required"
            )
        if (
            not isinstance(sources, torch.Tensor)
            or sources.dtype not in (torch.int32, torch.int64)
            or sources.shape != (n,)
        ):
            raise TypeError(f"sources must be an int tensor of shape [{n}]")
        S = selection.numel()
        if selection.ndim != 1 or S == 0:
            raise ValueError("selection source weights must be 1-D with at least one source")
        if sources.min() < 0 or sources.max() >= S:
            raise ValueError(f"sources must lie in [0, {S})")
        w = selection.double()
        if not torch.isfinite(w).all() or (w < 0).any():
            raise ValueError("selection source weights must be finite and >= 0")
        pools = [(sources == g).nonzero().squeeze(1) for g in range(S)]
        w = torch.where(torch.tensor([p.numel() > 0 for p in pools]), w, torch.zeros_like(w))
        if w.sum() <= 0:
            raise ValueError("selection is empty: every source with examples has weight 0")
        return pools, w / w.sum()
    if idx.numel() == 0:
        raise ValueError("selection is empty: select at least one example")
    return [idx], torch.ones(1, dtype=torch.float64)


def _probe_batch(
    pools: list[torch.Tensor], probs: torch.Tensor, batch_size: int, generator: torch.Generator
) -> torch.Tensor:
    """A fixed probe batch drawn from a generator derived from (a copy of) ``generator``'s state,
    so recording a curve never changes the training trajectory (the tau = 1 reduction needs this)."""
    fork = torch.Generator().manual_seed(0)
    fork.set_state(generator.get_state())
    seed = int(torch.randint(2**62, (1,), generator=fork)) ^ 0x5DEECE66D
    fork.manual_seed(seed)
    pool = torch.cat([p for p, w in zip(pools, probs) if w > 0])
    return pool[torch.randint(pool.numel(), (min(_PROBE_SIZE, batch_size * 8),), generator=fork)]


def _step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    pools: list[torch.Tensor],
    probs: torch.Tensor,
    batch_size: int,
    generator: torch.Generator,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """One optimizer step on a batch drawn (with replacement) from the selection."""
    g = 0 if len(pools) == 1 else int(torch.multinomial(probs, 1, generator=generator))
    pool = pools[g]
    batch = pool[torch.randint(pool.numel(), (batch_size,), generator=generator)]
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x[batch]), y[batch]).backward()
    optimizer.step()


def _checkpoint_ticks(checkpoints, budget: Budget) -> list[int]:
    """The sorted, distinct checkpoint steps, each in ``[0, budget.steps]`` (``[]`` for None)."""
    if checkpoints is None:
        return []
    ticks = sorted({check_int("checkpoints", t, low=0) for t in checkpoints})
    if ticks and ticks[-1] > budget.steps:
        raise ValueError(f"checkpoints must be <= budget.steps = {budget.steps}, got {ticks[-1]}")
    return ticks


def budgeted_train(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    selection: torch.Tensor,
    budget: Budget,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    generator: torch.Generator,
    checkpoints: list[int] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy,
    sources: torch.Tensor | None = None,
) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor] | None]:
    """Train ``model_factory()`` for exactly ``budget.steps`` steps of ``budget.batch_size``.

    ``selection``: int indices, a bool mask [n], or float source weights [S] with ``sources`` (a
    source id per example): each batch comes from source g with probability w_g / sum w.
    ``checkpoints``: step counts in [0, B] at which the training loss on a fixed probe batch (up to
    256 examples drawn once from the selection) is recorded; the curve ``(t, loss)`` feeds
    ``budget_min``. ``model_factory`` must build the same initial weights on every call (common
    theta_0); randomness comes only from ``generator``. Runs under ``enable_grad``.
    """
    if not callable(model_factory):
        raise TypeError("model_factory must be callable")
    if not callable(optimizer_factory):
        raise TypeError("optimizer_factory must be callable")
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
    check_generator(generator)
    x, y = _dataset(dataset)
    pools, probs = _selection(selection, x.shape[0], sources)
    ticks = _checkpoint_ticks(checkpoints, budget)
    model = model_factory()
    if not isinstance(model, nn.Module):
        raise TypeError("model_factory must return an nn.Module")
    optimizer = optimizer_factory(list(model.parameters()))

    probe = None
    if checkpoints is not None:
        probe = _probe_batch(pools, probs, budget.batch_size, generator)
    curve_t: list[int] = []
    curve_loss: list[float] = []

    def record(t: int) -> None:
        with torch.no_grad():
            curve_t.append(t)
            curve_loss.append(loss_fn(model(x[probe]), y[probe]).item())

    with torch.enable_grad():
        model.train()
        tick = 0
        while tick < len(ticks) and ticks[tick] == 0:
            record(0)
            tick += 1
        for step in range(1, budget.steps + 1):
            _step(model, optimizer, x, y, pools, probs, budget.batch_size, generator, loss_fn)
            while tick < len(ticks) and ticks[tick] == step:
                record(step)
                tick += 1
    curve = None
    if checkpoints is not None:
        curve = (
            torch.tensor(curve_t, dtype=torch.float64),
            torch.tensor(curve_loss, dtype=torch.float64),
        )
    return model, curve


def train_to_convergence(
    model_factory: Callable[[], nn.Module],
    dataset: tuple[torch.Tensor, torch.Tensor],
    selection: torch.Tensor,
    batch_size: int,
    optimizer_factory: Callable[[list], torch.optim.Optimizer],
    generator: torch.Generator,
    check_every: int = 50,
    tol: float = 1e-3,
    max_steps: int = 5000,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy,
    sources: torch.Tensor | None = None,
) -> tuple[nn.Module, int]:
    """PBCS's inner problem: train until the loss on a fixed probe batch of the selection improves
    by less than ``tol`` (relative) over ``check_every`` steps, or ``max_steps``; no budget.

    Batches are drawn exactly as in ``budgeted_train`` (same generator stream), so with the same
    seed its first B steps are A_B(m). Returns ``(model, steps_taken)``.
    """
    if not callable(model_factory):
        raise TypeError("model_factory must be callable")
    if not callable(optimizer_factory):
        raise TypeError("optimizer_factory must be callable")
    check_generator(generator)
    batch_size = check_int("batch_size", batch_size, low=1)
    check_every = check_int("check_every", check_every, low=1)
    max_steps = check_int("max_steps", max_steps, low=1)
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    x, y = _dataset(dataset)
    pools, probs = _selection(selection, x.shape[0], sources)
    model = model_factory()
    if not isinstance(model, nn.Module):
        raise TypeError("model_factory must return an nn.Module")
    optimizer = optimizer_factory(list(model.parameters()))
    probe = _probe_batch(pools, probs, batch_size, generator)

    def probe_loss() -> float:
        with torch.no_grad():
            return loss_fn(model(x[probe]), y[probe]).item()

    last, steps = probe_loss(), 0
    with torch.enable_grad():
        model.train()
        while steps < max_steps:
            for _ in range(min(check_every, max_steps - steps)):
                _step(model, optimizer, x, y, pools, probs, batch_size, generator, loss_fn)
                steps += 1
            now = probe_loss()
            if last - now < tol * max(abs(last), 1e-12):
                break
            last = now
    return model, steps
