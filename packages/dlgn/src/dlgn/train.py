"""A small training loop for logic gate networks (Adam, cross-entropy on GroupSum scores)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch
from torch import nn

from neurips25_core.progress import progress_bar

__all__ = ["TrainResult", "noise_generator", "train"]


def noise_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """The Gumbel noise generator: seed it alike on every DDP rank (one circuit per step)."""
    return torch.Generator(device=device).manual_seed(seed)


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        losses: the training loss of every step.
        history: the ``evaluate`` records (each with ``step`` and ``seconds`` of training so far).
        seconds: training wall-clock, evaluation excluded.
    """

    losses: list[float]
    history: list[dict]
    seconds: float


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    lr: float = 0.01,
    batch_size: int = 100,
    seed: int = 0,
    eval_every: int = 0,
    evaluate: Callable[[int], dict] | None = None,
    progress: bool = True,
    desc: str = "",
) -> TrainResult:
    """Train with Adam on shuffled mini-batches (epochs of a seeded permutation).

    Args:
        model: (B, in) → (B, k) scores (a :class:`~dlgn.LogicNet` or any module).
        x: (N, in) float inputs.
        y: (N,) int64 labels.
        steps: optimizer steps.
        lr: Adam's learning rate (0.01 as in the official code).
        batch_size: samples per step.
        seed: seed of the batch order.
        eval_every: call ``evaluate(step)`` every this many steps and after the last (0: never).
        evaluate: returns a dict of metrics; the model is put back in train mode afterwards.
        progress: show a progress bar (quiet off a terminal).
        desc: the bar's label.

    Returns:
        :class:`TrainResult`.

    Example:
        >>> from dlgn import LogicNet
        >>> _ = torch.manual_seed(0)
        >>> net = LogicNet.from_widths(8, [16, 8], num_classes=2, tau=4.0)
        >>> x = torch.randint(0, 2, (64, 8)).float()
        >>> len(train(net, x, x[:, 0].long(), steps=3, batch_size=16, progress=False).losses)
        3
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(
            f"y: expected ({x.shape[0]},) labels for x {tuple(x.shape)}, got {tuple(y.shape)}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size}")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    pos = 0
    losses, history = [], []
    seconds = 0.0
    model.train()
    bar = progress_bar(total=steps, desc=desc, enabled=progress)
    with torch.enable_grad():
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            if pos + batch_size > len(order):
                order = torch.randperm(len(x), generator=g)
                pos = 0
            idx = order[pos : pos + batch_size]
            pos += batch_size
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seconds += time.perf_counter() - t0
            losses.append(loss.item())
            bar.update(1)
            if evaluate is not None and eval_every and (step % eval_every == 0 or step == steps):
                record = {"step": step, "seconds": seconds, **evaluate(step)}
                history.append(record)
                model.train()
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    return TrainResult(losses=losses, history=history, seconds=seconds)
