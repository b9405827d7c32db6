"""The runs the reproduction fits: a noisy quadratic (seconds) and a tiny Llama on the stdlib corpus.

Both follow any LR schedule given as an array. The Llama runs through
:func:`neurips25_core.models.train` (enable_grad, clipping, argument checks) with an AdamW whose
LR follows the schedule step by step (:class:`ScheduledAdamW`), in segments of ``eval_every``
steps with the validation loss on fixed sequences between them, cached with
:func:`neurips25_core.models.cached_checkpoint` (the key holds the config, the corpus fingerprint,
the schedule, every training argument and the seeds).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import torch

from lrannealing._checks import as_lrs, check_int
from lrannealing.law import Curve
from lrannealing.recorder import LossCurveRecorder

__all__ = ["ScheduledAdamW", "lm_curve", "noisy_quadratic_curve", "train_schedule"]

#: Bump when the training loop changes what a cached run contains.
_VERSION = 1


class ScheduledAdamW(torch.optim.AdamW):
    """AdamW whose LR at its ``i``-th ``step()`` is ``lrs[i]`` (a schedule given as an array).

    Example:
        >>> import torch
        >>> p = torch.nn.Parameter(torch.zeros(2))
        >>> opt = ScheduledAdamW([p], lrs=[0.1, 0.05, 0.0])
        >>> p.grad = torch.ones(2)
        >>> opt.step()
        >>> opt.param_groups[0]["lr"]
        0.1
    """

    def __init__(self, params, lrs, **kwargs: Any):
        self.schedule = as_lrs(lrs)
        super().__init__(params, lr=float(self.schedule[0]), **kwargs)
        self.schedule_step = 0

    @torch.no_grad()
    def step(self, closure=None):
        if self.schedule_step >= self.schedule.size:
            raise RuntimeError(f"step: the schedule has {self.schedule.size} LRs and all were used")
        for group in self.param_groups:
            group["lr"] = float(self.schedule[self.schedule_step])
        self.schedule_step += 1
        return super().step(closure)


def train_schedule(
    lrs,
    config,
    corpus,
    steps: int,
    batch_size: int = 8,
    seq_len: int = 128,
    eval_every: int = 50,
    eval_sequences: int = 64,
    seed: int = 0,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    progress: bool = True,
    desc: str = "train",
) -> dict[str, Any]:
    """Train a fresh tiny Llama (init seed ``seed``) for ``steps`` steps following ``lrs``.

    Every run with the same ``seed`` sees the same initialisation and the same batches; only the
    schedule differs. Returns ``{"steps", "loss" (validation nats on ``eval_sequences`` fixed
    sequences), "lrs_used", "train_loss", "seconds"}``.
    """
    from neurips25_core.models import evaluate_bpb, tiny_llama, train
    from neurips25_core.progress import progress_bar

    lrs = as_lrs(lrs)
    steps = check_int(steps, "steps", 1)
    eval_every = check_int(eval_every, "eval_every", 1)
    if lrs.size < steps:
        raise ValueError(f"lrs: expected at least steps={steps} LRs, got {lrs.size}")
    model = tiny_llama(config, seed=seed)
    opt = ScheduledAdamW(model.parameters(), lrs, weight_decay=weight_decay, betas=(0.9, 0.95))
    recorder = LossCurveRecorder(source="val", reduce=False)
    used: list[float] = []
    train_loss: list[float] = []
    seconds = 0.0
    done = 0
    with progress_bar(total=steps, desc=desc, enabled=progress) as bar:
        while done < steps:
            n = min(eval_every, steps - done)
            res = train(
                model,
                corpus,
                steps=n,
                optimizer=opt,
                schedule=False,
                batch_size=batch_size,
                seq_len=seq_len,
                grad_clip=grad_clip,
                seed=seed * 1_000_003
                + done,  # fresh batches per segment, the same for every schedule
                progress=False,
            )
            used += res.lrs
            train_loss += res.losses
            seconds += res.seconds
            done += n
            bpb = evaluate_bpb(
                model, corpus, batch_size=eval_sequences, seq_len=seq_len, num_batches=1, seed=seed
            )
            recorder.record(done, None, bpb * math.log(2))
            if bar is not None:
                bar.update(n)
    return {
        "steps": recorder.steps,
        "loss": recorder.losses,
        "lrs_used": used,
        "train_loss": train_loss,
        "seconds": seconds,
    }


def lm_curve(
    name: str,
    lrs,
    warmup_steps: int,
    config,
    corpus,
    steps: int,
    batch_size: int = 8,
    seq_len: int = 128,
    eval_every: int = 50,
    eval_sequences: int = 64,
    seed: int = 0,
    progress: bool = True,
) -> tuple[Curve, dict[str, Any]]:
    """:func:`train_schedule`, cached: ``(Curve of the validation loss, meta)``."""
    from neurips25_core.models import cached_checkpoint, train_arguments

    lrs = as_lrs(lrs)
    args = dict(
        steps=steps,
        batch_size=batch_size,
        seq_len=seq_len,
        eval_every=eval_every,
        eval_sequences=eval_sequences,
        seed=seed,
    )

    def build():
        out = train_schedule(lrs, config, corpus, progress=progress, desc=name, **args)
        payload = {
            k: torch.tensor(out[k], dtype=torch.float64)
            for k in ("steps", "loss", "lrs_used", "train_loss")
        }
        return payload, {"seconds": out["seconds"], "name": name}

    payload, meta = cached_checkpoint(
        "lrannealing_curve",
        {
            "config": config,
            "data": corpus.fingerprint,
            "schedule": hashlib.sha256(lrs.tobytes()).hexdigest()[:16],
            "run": args,
            "train": train_arguments(
                steps=eval_every,
                batch_size=batch_size,
                seq_len=seq_len,
                schedule=False,
                grad_clip=1.0,
                weight_decay=0.1,
            ),
            "optimizer": {"AdamW": {"betas": (0.9, 0.95), "weight_decay": 0.1}},
            "version": _VERSION,
        },
        build,
    )
    used = payload["lrs_used"].numpy()
    if not np.allclose(used, lrs[: used.size], rtol=1e-12, atol=0):
        raise RuntimeError(f"{name}: the optimizer's LRs differ from the schedule")
    curve = Curve(
        payload["steps"].numpy().astype(np.int64),
        payload["loss"].numpy(),
        lrs,
        warmup_steps=warmup_steps,
        name=name,
        source="val",
    )
    meta["train_loss"] = payload["train_loss"].numpy()
    return curve, meta


def noisy_quadratic_curve(
    lrs,
    dim: int = 1000,
    power: float = 1.0,
    noise: float = 1.0,
    floor: float = 1.0,
    init: float = 1.0,
) -> np.ndarray:
    """Expected loss of SGD on a power-law-spectrum quadratic with additive gradient noise.

    f(x) = floor + ½ Σ_i h_i x_i², h_i = i^(−power); the stochastic gradient is h∘x + ε with
    ε ~ N(0, noise²·h) (noise shaped like the curvature, as in the noisy quadratic model of Zhang
    et al. 2019). Its mean evolves exactly: E[x_i²]' = (1 − η h_i)² E[x_i²] + η² noise² h_i, so
    the loss after each step is computed without sampling. A lower LR lowers the noise floor
    (η·noise²/4 per direction) with a lag of 1/(η h_i) steps: the annealing drop and its delay.

    Returns the loss after every step: (len(lrs),) float64, ``out[s]`` after steps 0..s.
    """
    lrs = as_lrs(lrs)
    dim = check_int(dim, "dim", 1)
    h = np.arange(1, dim + 1, dtype=np.float64) ** (-float(power))
    second = np.full(dim, float(init) ** 2)
    out = np.empty(lrs.size)
    for s, eta in enumerate(lrs):
        second = (1.0 - eta * h) ** 2 * second + eta**2 * noise**2 * h
        out[s] = floor + 0.5 * float(h @ second)
    return out
