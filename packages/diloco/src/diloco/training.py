"""One training run of the reduced reproduction: DP (DDP), DiLoCo (ours) or torchft, on real gloo ranks.

Every rank draws the same global batch of B windows of the stdlib corpus from a seeded generator
and trains on its contiguous slice (B/M sequences), so every algorithm sees the same tokens in the
same order. T = D / (B · seq_len) with D = ``tokens_per_param`` · N. Inner optimizer: AdamW with
β = (0.9, 0.99), weight decay 1/T, warm-up then cosine to 5 % of the peak (the core's
``warmup_cosine``), gradients clipped to norm 1 per replica. The loss carries the z-loss; the
reported validation loss is the plain cross-entropy (nats/byte) of the global model on fixed
validation windows.

Example (one replica, a toy model, a few seconds):

    >>> spec = RunSpec(
    ...     algo="diloco",
    ...     hidden=8,
    ...     layers=1,
    ...     replicas=1,
    ...     sync_every=5,
    ...     batch=4,
    ...     inner_lr=3e-3,
    ...     steps=10,
    ...     eval_batches=1,
    ...     seq_len=32,
    ... )
    >>> out = run(spec)
    >>> out["outer_steps"], out["inner_steps"]
    (2, 10)
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

__all__ = ["RunSpec", "run", "train_rank"]


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything one run depends on (the cache key of its result).

    Attributes:
        algo: ``"dp"`` (DDP AdamW on ``dp_ranks`` processes), ``"diloco"`` (ours, ``replicas``
            processes) or ``"torchft"`` (``torchft.local_sgd.DiLoCo``, ``replicas`` processes).
        hidden, layers: the Llama width and depth.
        replicas: M (DiLoCo / torchft).
        sync_every: H.
        batch: global batch B in sequences.
        inner_lr: γ, the peak AdamW learning rate.
        outer_lr: η (None: the paper's Fig. 7 value for M).
        tokens_per_param: D / N (paper: 20).
        steps: T; None derives it from D = tokens_per_param · N.
        warmup_frac: warm-up steps as a fraction of T.
        seq_len: context length.
        seed: initialisation and data order.
        z_loss: z-loss coefficient (paper: 1e-4).
        eval_batches: validation batches of 32 windows for the final loss.
        dp_ranks: processes of the DP baseline (the global batch is split over them).
        final_sync: DiLoCo's last outer step when T % H != 0 (off, as in the paper).
        steps_multiple: T derived from D is rounded to the nearest positive multiple of this (the
            suite passes H = 30, so no inner steps are dropped at the end; all algorithms of a
            cell share T, so D stays equal across them).
        device: where each rank trains (``"cuda"``: every rank on GPU 0, gloo on CUDA tensors).
    """

    algo: str = "diloco"
    hidden: int = 24
    layers: int = 2
    replicas: int = 2
    sync_every: int = 30
    batch: int = 32
    inner_lr: float = 8e-3
    outer_lr: float | None = None
    tokens_per_param: float = 20.0
    steps: int | None = None
    warmup_frac: float = 0.05
    seq_len: int = 128
    seed: int = 0
    z_loss: float = 1e-4
    eval_batches: int = 8
    dp_ranks: int = 2
    final_sync: bool = False
    steps_multiple: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.algo not in ("dp", "diloco", "torchft"):
            raise ValueError(f"algo: expected 'dp', 'diloco' or 'torchft', got {self.algo!r}")
        if self.batch % self.world:
            raise ValueError(f"batch: {self.batch} is not divisible by the {self.world} ranks")
        if not (isinstance(self.steps_multiple, int) and self.steps_multiple >= 1):
            raise ValueError(f"steps_multiple: expected an int >= 1, got {self.steps_multiple!r}")
        if not self.inner_lr > 0:
            raise ValueError(f"inner_lr: expected > 0, got {self.inner_lr!r}")

    @property
    def world(self) -> int:
        """Processes this run uses."""
        return self.dp_ranks if self.algo == "dp" else self.replicas

    @property
    def config(self):
        from diloco.models import ladder_config

        return ladder_config(self.hidden, self.layers, seq_len=self.seq_len)

    @property
    def parameters(self) -> int:
        from diloco.models import count_parameters

        return count_parameters(self.config)

    @property
    def total_steps(self) -> int:
        if self.steps is not None:
            return self.steps
        tokens = self.tokens_per_param * self.parameters
        k = self.steps_multiple
        return k * max(1, round(tokens / (self.batch * self.seq_len * k)))


def _evaluate(model, corpus, spec: RunSpec) -> float:
    from neurips25_core.models import causal_lm_loss

    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in corpus.batches(
            "val", 32, spec.seq_len, seed=1234, num_batches=spec.eval_batches
        ):
            total += float(causal_lm_loss(model, x.to(spec.device), y.to(spec.device)))
    model.train()
    return total / spec.eval_batches


def train_rank(rank: int, world: int, spec: RunSpec, extra: dict | None = None) -> dict[str, Any]:
    """The per-rank body of a run (called by :func:`run` through ``run_replicas``)."""
    from diloco.engine import DiLoCo, DiLoCoConfig, split_global_batch
    from diloco.models import lm_loss
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import tiny_llama, warmup_cosine

    corpus = stdlib_corpus()
    steps = spec.total_steps
    model = tiny_llama(spec.config, seed=spec.seed).to(spec.device)
    params = [p for p in model.parameters() if p.requires_grad]
    inner = torch.optim.AdamW(params, lr=spec.inner_lr, betas=(0.9, 0.99), weight_decay=1.0 / steps)
    warmup = max(1, round(spec.warmup_frac * steps))
    schedule = warmup_cosine(inner, steps, warmup, min_lr_ratio=0.05)
    gen = torch.Generator().manual_seed(10_000 + spec.seed)
    diloco = ft = None
    train_model = model
    counter = None
    if spec.algo == "dp":
        from torch.nn.parallel import DistributedDataParallel

        from diloco.engine import ByteCounter

        train_model = DistributedDataParallel(model)
        counter = ByteCounter()
        counter.register_ddp(train_model)
    elif spec.algo == "diloco":
        diloco = DiLoCo(
            model,
            inner,
            DiLoCoConfig(
                sync_every=spec.sync_every, outer_lr=spec.outer_lr, final_sync=spec.final_sync
            ),
        )
        counter = diloco.counter
    else:
        from diloco.peer import torchft_diloco

        ft = torchft_diloco(model, inner, spec, rank, world, extra or {})
    losses: list[float] = []
    start = time.perf_counter()
    try:
        for _ in range(steps):
            batch = corpus.get_batch("train", spec.batch, spec.seq_len, generator=gen)
            x, y = (t.to(spec.device) for t in split_global_batch(batch, rank, world))
            loss = lm_loss(train_model, x, y, z_loss=spec.z_loss)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()}")
            inner.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            inner.step()
            schedule.step()
            if diloco is not None:
                diloco.step()
            losses.append(loss.item())
        if diloco is not None:
            diloco.finish()
        seconds = time.perf_counter() - start
        out: dict[str, Any] = {
            "train_loss": sum(losses[-10:]) / len(losses[-10:]),
            "steps": steps,
            "inner_steps": diloco.inner_steps if diloco is not None else steps,
            "outer_steps": diloco.outer_steps if diloco is not None else 0,
            "bytes_all_reduced": counter.bytes if counter is not None else None,
            "seconds": seconds,
        }
        if ft is not None:
            out.update(ft.finish())
        if rank == 0:
            out["val_loss"] = _evaluate(model, corpus, spec)
            out["parameters"] = sum(p.numel() for p in params)
        return out
    finally:
        if ft is not None:
            ft.close()


def run(spec: RunSpec) -> dict[str, Any]:
    """Run ``spec`` on ``spec.world`` gloo processes; rank 0's summary plus the tokens trained."""
    from transformers import LlamaForCausalLM  # noqa: F401  (imported once, inherited by the ranks)

    from diloco.engine import run_replicas
    from neurips25_core.data import stdlib_corpus

    stdlib_corpus()  # read once here: forked ranks inherit the cached corpus
    extra: dict[str, Any] = {}
    lighthouse = None
    if spec.algo == "torchft":
        from diloco.peer import start_lighthouse

        lighthouse = start_lighthouse(spec.replicas)
        extra["lighthouse"] = lighthouse.address()
    try:
        results = run_replicas(train_rank, spec.world, args=(spec, extra))
    finally:
        if lighthouse is not None:
            lighthouse.shutdown()
    out = dict(results[0])
    out["tokens"] = out["steps"] * spec.batch * spec.seq_len
    out["val_loss_bits"] = out["val_loss"] / math.log(2)
    return out
