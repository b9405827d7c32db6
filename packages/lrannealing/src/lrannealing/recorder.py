"""``LossCurveRecorder``: log (step, lr, loss) during training, get a :class:`Curve` to fit.

A plain loop calls ``recorder.record(step, lr, loss)``; a ``transformers.Trainer`` takes
``recorder.trainer_callback()`` in ``callbacks=[...]``. Under ``torch.distributed`` every rank calls
``record`` with its local loss, the loss is all-reduced (mean over ranks) and rank 0 keeps it.

Example (CPU):

    >>> from lrannealing import LossCurveRecorder
    >>> rec = LossCurveRecorder(source="train")
    >>> for step in range(8):
    ...     _ = rec.record(step, lr=1e-3, loss=3.0 / (step + 1))
    >>> curve = rec.curve(name="demo")
    >>> curve.steps.tolist()[:3], curve.source
    ([0, 1, 2], 'train')
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lrannealing._checks import check_int
from lrannealing.law import Curve

__all__ = ["LossCurveRecorder"]


def _distributed():
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


class LossCurveRecorder:
    """Records the learning rate of every step and the loss where it is measured.

    Args:
        ema: smooth the recorded loss with an exponential moving average of this factor
            (bias-corrected, e.g. 0.9); None keeps the raw loss. The spec's pitfall: a train-loss
            EMA lags the schedule, so fit validation loss where you can.
        source: what the loss is (``"train"`` or ``"val"``); ``"_ema"`` is appended when smoothed.
        reduce: all-reduce the loss over ``torch.distributed`` ranks when a process group is up.
    """

    def __init__(self, ema: float | None = None, source: str = "train", reduce: bool = True):
        if ema is not None and (
            isinstance(ema, bool) or not isinstance(ema, (int, float)) or not 0.0 < ema < 1.0
        ):
            raise ValueError(f"ema: expected None or a number in (0, 1), got {ema!r}")
        if not isinstance(source, str) or not source:
            raise ValueError(f"source: expected a non-empty string, got {source!r}")
        self.ema = ema
        self.source = source + ("_ema" if ema is not None else "")
        self.reduce = reduce
        self.lrs: dict[int, float] = {}
        self.steps: list[int] = []
        self.losses: list[float] = []
        self.raw_losses: list[float] = []
        self._ema_value = 0.0
        self._ema_count = 0

    @property
    def is_recording(self) -> bool:
        """True on rank 0 (or without a process group): the rank that keeps the curve."""
        dist = _distributed()
        return dist is None or dist.get_rank() == 0

    def record_lr(self, step: int, lr: float) -> None:
        """The LR optimizer step ``step`` used (every step, even where no loss is measured)."""
        step = check_int(step, "step", 0)
        if (
            isinstance(lr, bool)
            or not isinstance(lr, (int, float))
            or not (math.isfinite(lr) and lr >= 0)
        ):
            raise ValueError(f"lr: expected a finite number >= 0, got {lr!r}")
        self.lrs[step] = float(lr)

    def record(self, step: int, lr: float | None, loss: Any) -> float | None:
        """Record the loss at ``step`` (and the LR of that step unless None). Returns what was stored.

        ``loss`` is a float or a scalar tensor. Under ``torch.distributed`` every rank must call
        this (the all-reduce is collective); rank 0 keeps the mean over ranks.
        """
        step = check_int(step, "step", 0)
        if lr is not None:
            self.record_lr(step, lr)
        dist = _distributed()
        if hasattr(loss, "detach"):
            value = loss.detach().double().reshape(())
            if self.reduce and dist is not None:
                value = value.clone()
                dist.all_reduce(value, op=dist.ReduceOp.SUM)
                value = value / dist.get_world_size()
            value = float(value)
        else:
            if isinstance(loss, bool) or not isinstance(loss, (int, float, np.floating)):
                raise TypeError(
                    f"loss: expected a float or a scalar tensor, got {type(loss).__name__}"
                )
            value = float(loss)
            if self.reduce and dist is not None:
                import torch

                t = torch.tensor(value, dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                value = float(t) / dist.get_world_size()
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"loss: expected a finite loss > 0 at step {step}, got {value!r}")
        if self.steps and step <= self.steps[-1]:
            raise ValueError(f"step: expected > {self.steps[-1]} (steps increase), got {step}")
        stored = value
        if self.ema is not None:
            self._ema_count += 1
            self._ema_value = self.ema * self._ema_value + (1 - self.ema) * value
            stored = self._ema_value / (1 - self.ema**self._ema_count)
        if not self.is_recording:
            return None
        self.steps.append(step)
        self.raw_losses.append(value)
        self.losses.append(stored)
        return stored

    __call__ = record

    def curve(self, name: str = "", warmup_steps: int = 0, lrs=None, start: int = 0) -> Curve:
        """The recorded losses (from step ``start`` on) as a :class:`Curve`.

        The LRs come from the recorded ones (``lrs`` overrides them): every step 0..max(steps)
        must be known, except a tail after the last recorded LR, which repeats it (a loss logged
        after the final update has no next LR).
        """
        if not self.steps:
            raise ValueError("curve: no loss was recorded (on a non-zero rank nothing is kept)")
        last = self.steps[-1]
        if lrs is None:
            if not self.lrs:
                raise ValueError("lrs: no learning rate was recorded; pass lrs=")
            top = max(self.lrs)
            missing = [s for s in range(min(top, last) + 1) if s not in self.lrs]
            if missing:
                raise ValueError(
                    f"lrs: the LR of step(s) {missing[:5]}... was not recorded; record_lr every step"
                )
            lrs = [self.lrs[s] for s in range(top + 1)]
            lrs += [lrs[-1]] * max(0, last + 1 - len(lrs))
        steps = np.asarray(self.steps)
        keep = steps >= start
        return Curve(
            steps[keep],
            np.asarray(self.losses)[keep],
            np.asarray(lrs, dtype=np.float64),
            warmup_steps=warmup_steps,
            name=name,
            source=self.source,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "loss": list(self.losses),
            "raw_loss": list(self.raw_losses),
            "lrs": [self.lrs[s] for s in sorted(self.lrs)],
            "source": self.source,
        }

    def trainer_callback(self):
        """A ``transformers.TrainerCallback`` feeding this recorder.

        It records the LR each optimizer step uses (``on_step_begin``) and the loss the Trainer
        logs (``on_log``: ``"loss"`` for ``source="train"``, ``"eval_loss"`` for ``source="val"``)
        at ``state.global_step``. The Trainer already averages its logged loss over ranks.
        """
        from transformers import TrainerCallback

        recorder = self
        key = "eval_loss" if self.source.startswith("val") else "loss"

        class _Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
                if optimizer is not None:
                    recorder.record_lr(state.global_step, float(optimizer.param_groups[0]["lr"]))

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and key in logs:
                    reduce, recorder.reduce = recorder.reduce, False
                    try:
                        recorder.record(state.global_step, None, float(logs[key]))
                    finally:
                        recorder.reduce = reduce

        return _Callback()
