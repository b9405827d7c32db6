"""A small training and evaluation loop for the synthetic tasks (used by the benchmark and tests).

AdamW, one-cycle schedule (linear warm-up, cosine decay), gradient clipping, fresh batches every
step (the tasks are generated on the fly, as in the official code), loss and accuracy at the
masked positions.

The loop is our own (not ``neurips25_core.models.train``) because the official protocol needs a
one-cycle schedule that spans a run trained in segments with evaluations in between; like the
core loop it always trains: it runs under ``torch.enable_grad()`` and leaves inference mode, so
an outer ``torch.no_grad()`` or ``torch.inference_mode()`` cannot silently turn training off.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

from .tasks import Task

__all__ = ["TrainResult", "Trainer", "evaluate", "train_task"]


@dataclasses.dataclass
class TrainResult:
    """Per-step training losses and the wall time in seconds."""

    losses: list[float]
    seconds: float


class Trainer:
    """Stateful training loop: one optimizer and one-cycle schedule over ``steps`` steps, run in
    segments (so a caller can evaluate in between, as the official protocol does).

    Args:
        model: a per-token classifier such as :class:`pdssm.PDSSM` with ``output="all"``.
        task: the task to sample.
        steps: total optimizer steps (the schedule's length).
        min_length, max_length: training length range (inclusive).
        batch_size: sequences per step.
        lr: peak learning rate of the one-cycle schedule.
        weight_decay: AdamW weight decay.
        warmup: fraction of steps spent warming up.
        grad_clip: gradient-norm clip.
        seed: seed of the batch stream.
        progress: show a progress bar (``neurips25_core.progress.progress_bar``; quiet off a
            terminal).
        desc: the bar's label.
    """

    def __init__(
        self,
        model: nn.Module,
        task: Task,
        steps: int,
        min_length: int,
        max_length: int | None = None,
        batch_size: int = 64,
        lr: float = 1e-2,
        weight_decay: float = 0.01,
        warmup: float = 0.1,
        grad_clip: float = 1.0,
        seed: int = 0,
        progress: bool = True,
        desc: str = "train",
    ) -> None:
        self.model, self.task, self.steps = model, task, steps
        self.min_length, self.max_length, self.batch_size = min_length, max_length, batch_size
        self.grad_clip, self.progress, self.desc = grad_clip, progress, desc
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(
            self.opt, max_lr=lr, total_steps=steps, pct_start=warmup, anneal_strategy="cos"
        )
        self.gen = torch.Generator().manual_seed(seed)
        self.loss_fn = nn.CrossEntropyLoss()
        self.losses: list[float] = []

    def run(self, n: int) -> float:
        """Run ``n`` more steps (at most the remaining ones); return the seconds taken.

        Trains even inside ``torch.no_grad()`` or ``torch.inference_mode()``.
        """
        if torch.is_inference_mode_enabled():
            with torch.inference_mode(False):
                return self.run(n)
        with torch.enable_grad():
            return self._run(n)

    def _run(self, n: int) -> float:
        from neurips25_core.progress import progress_bar

        n = min(n, self.steps - len(self.losses))
        start = time.perf_counter()
        self.model.train()
        bar = progress_bar(range(n), desc=self.desc, enabled=self.progress, leave=False)
        for _ in bar:
            x, y, mask = self.task.sample(
                self.batch_size, self.min_length, self.max_length, generator=self.gen
            )
            logits = self.model(x)
            loss = self.loss_fn(logits[mask], y[mask])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.opt.step()
            self.sched.step()
            self.losses.append(loss.item())
            if self.progress:
                bar.set_postfix(loss=f"{self.losses[-1]:.3f}")
        return time.perf_counter() - start


def train_task(
    model: nn.Module,
    task: Task,
    steps: int,
    min_length: int,
    max_length: int | None = None,
    **kwargs,
) -> TrainResult:
    """Train ``model`` (tokens (B, T) → logits (B, T, C)) on fresh batches of ``task``.

    AdamW with a one-cycle schedule (linear warm-up, cosine decay) and gradient clipping; the
    keyword arguments are those of :class:`Trainer` (``batch_size=64, lr=1e-2,
    weight_decay=0.01, warmup=0.1, grad_clip=1.0, seed=0, progress=True, desc="train"``).

    Returns:
        A :class:`TrainResult`.
    """
    trainer = Trainer(model, task, steps, min_length, max_length, **kwargs)
    seconds = trainer.run(steps)
    return TrainResult(losses=trainer.losses, seconds=seconds)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    task: Task,
    min_length: int,
    max_length: int | None = None,
    num_samples: int = 512,
    batch_size: int = 128,
    seed: int = 12345,
) -> dict[str, float]:
    """Accuracy on fresh samples.

    Returns:
        ``{"token_acc": accuracy over all labelled positions, "final_acc": accuracy at each
        sequence's last labelled position}`` (equal for final-token tasks).
    """
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    correct = total = final_correct = final_total = 0
    remaining = num_samples
    while remaining > 0:
        n = min(batch_size, remaining)
        remaining -= n
        x, y, mask = task.sample(n, min_length, max_length, generator=gen)
        pred = model(x).argmax(-1)
        hit = (pred == y) & mask
        correct += int(hit.sum())
        total += int(mask.sum())
        last = mask.long().cumsum(1).argmax(1)  # index of the last labelled position
        rows = torch.arange(n)
        final_correct += int(hit[rows, last].sum())
        final_total += n
    model.train()
    return {"token_acc": correct / total, "final_acc": final_correct / final_total}
