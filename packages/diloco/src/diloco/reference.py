"""The spec in code: DiLoCo (Algorithm 1) with M in-memory replicas in one process (float64-capable).

Nothing here is distributed or fast. The outer Nesterov step is written out rather than taken from
``torch.optim.SGD``, so the engine (which uses torch's SGD and a real all-reduce) is checked
against an independent statement of the algorithm:

    b ← μ·b + Δ;   θ ← θ − η·(Δ + μ·b)        (Nesterov, dampening 0; plain momentum: θ ← θ − η·b)

with Δ = (1/M)·Σ_m (θ_global − θ_m). The first outer step therefore moves η(1+μ)Δ.

Example (float64, two replicas of a linear model, four inner SGD steps, H = 2):

    >>> import torch
    >>> model = torch.nn.Linear(3, 1).double()
    >>> xs = torch.randn(4, 8, 3, dtype=torch.float64)
    >>> out = reference_diloco(
    ...     model,
    ...     lambda t: (xs[t], xs[t].sum(-1, keepdim=True)),
    ...     steps=4,
    ...     replicas=2,
    ...     sync_every=2,
    ...     inner_optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
    ...     outer_lr=0.7,
    ...     outer_momentum=0.9,
    ...     loss_fn=lambda m, b: (m(b[0]) - b[1]).square().mean(),
    ... )
    >>> out["outer_steps"], out["inner_steps"]
    (2, [4, 4])
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from diloco.engine import split_global_batch

__all__ = ["nesterov_outer_step", "reference_diloco"]


@torch.no_grad()
def nesterov_outer_step(
    theta: list[torch.Tensor],
    delta: list[torch.Tensor],
    buffers: list[torch.Tensor] | None,
    lr: float,
    momentum: float,
    nesterov: bool = True,
) -> list[torch.Tensor]:
    """One outer SGD step in place on ``theta``; returns the momentum buffers (new on the first call)."""
    if buffers is None:
        buffers = [torch.zeros_like(d) for d in delta]
    for t, d, b in zip(theta, delta, buffers, strict=True):
        b.mul_(momentum).add_(d)
        update = d + momentum * b if nesterov else b
        t.sub_(lr * update)
    return buffers


def reference_diloco(
    model: nn.Module,
    batches: Callable[[int], Any],
    steps: int,
    replicas: int,
    sync_every: int,
    inner_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    outer_lr: float,
    outer_momentum: float = 0.9,
    nesterov: bool = True,
    final_sync: bool = False,
    grad_clip: float | None = None,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
    on_sync: Callable[[int, list[torch.Tensor]], None] | None = None,
) -> dict[str, Any]:
    """Algorithm 1 with ``replicas`` copies of ``model`` stepped one after the other.

    Args:
        model: θ(0); copied, never modified.
        batches: ``step -> global batch`` (a tensor or tuple of tensors, dim 0 = B); replica m
            trains on ``split_global_batch(batch, m, replicas)``.
        steps: T inner steps.
        replicas: M.
        sync_every: H.
        inner_optimizer: ``params -> Optimizer``, one per replica (state kept across rounds).
        outer_lr, outer_momentum, nesterov: the outer SGD (written out, see the module doc).
        final_sync: one more outer step after the last inner step when ``steps % H != 0``
            (default off, as in the paper and :class:`diloco.DiLoCoConfig`).
        grad_clip: clip each replica's gradient to this global ℓ2 norm (per replica), or None.
        loss_fn: ``(model, local_batch) -> scalar``; default: the causal-LM loss of ``(x, y)``.
        scheduler: ``optimizer -> LR scheduler`` stepped after every inner step, or None.
        on_sync: called as ``on_sync(outer_step, θ_global)`` after every outer step.

    Returns:
        ``{"global": θ_global tensors, "replicas": per-replica parameter lists, "outer_steps",
        "inner_steps" (per replica), "losses" (per step, mean over replicas)}``.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas: expected an int >= 1, got {replicas!r}")
    if not isinstance(sync_every, int) or sync_every < 1:
        raise ValueError(f"sync_every: expected an int >= 1, got {sync_every!r}")
    if loss_fn is None:
        from neurips25_core.models import causal_lm_loss

        def loss_fn(m: nn.Module, batch: Any) -> torch.Tensor:
            return causal_lm_loss(m, batch[0], batch[1])

    models = [copy.deepcopy(model) for _ in range(replicas)]
    params = [[p for p in m.parameters() if p.requires_grad] for m in models]
    optimizers = [inner_optimizer(ps) for ps in params]
    schedulers = [scheduler(o) for o in optimizers] if scheduler is not None else None
    theta = [p.detach().clone() for p in params[0]]
    buffers = None
    outer_steps = 0
    inner_steps = [0] * replicas
    losses: list[float] = []

    def outer() -> None:
        nonlocal buffers, outer_steps
        with torch.no_grad():
            delta = [torch.zeros_like(t) for t in theta]
            for ps in params:
                for d, t, p in zip(delta, theta, ps, strict=True):
                    d.add_(t - p)
            for d in delta:
                d.div_(replicas)
            buffers = nesterov_outer_step(theta, delta, buffers, outer_lr, outer_momentum, nesterov)
            for ps in params:
                for t, p in zip(theta, ps, strict=True):
                    p.copy_(t)
        outer_steps += 1
        if on_sync is not None:
            on_sync(outer_steps, theta)

    with torch.enable_grad():
        for step in range(steps):
            batch = batches(step)
            total = 0.0
            for m in range(replicas):
                local = split_global_batch(batch, m, replicas)
                loss = loss_fn(models[m], local)
                optimizers[m].zero_grad(set_to_none=True)
                loss.backward()
                if grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(params[m], grad_clip)
                optimizers[m].step()
                if schedulers is not None:
                    schedulers[m].step()
                inner_steps[m] += 1
                total += loss.item()
            losses.append(total / replicas)
            if (step + 1) % sync_every == 0:
                outer()
    if steps % sync_every and final_sync:
        outer()
    return {
        "global": [t.clone() for t in theta],
        "replicas": [[p.detach().clone() for p in ps] for ps in params],
        "outer_steps": outer_steps,
        "inner_steps": inner_steps,
        "losses": losses,
    }
