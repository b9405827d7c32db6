"""Training a multi-bit network: ours, Any-Precision, Dedicated and joint training; evaluation.

Every method runs on :func:`neurips25_core.models.train` (Adam, cosine decay to 0, no warm-up, no
clipping, no weight decay: Any-Precision's CIFAR recipe). One optimizer step takes one batch per
child: the ``data`` callable hands ``models.train`` the children's batches stacked on a leading
axis (all children's subsets have the same size k, so batch i has the same size in every child),
and the loss is the sum of the children's losses, which gives the same gradient as accumulating
them one backward at a time. The same callable re-draws the subsets at epoch boundaries and
re-scores every ``cfg.rescore_every`` epochs after the warm-up.

Under ``torch.distributed`` (one process group, ``world_size > 1``) every rank holds the whole
dataset; scores are computed on a shard per rank and all-gathered, so every rank draws the same
subsets; each rank trains on its slice ``rank::world_size`` of every global batch through
``DistributedDataParallel``; every BatchNorm all-reduces its batch moments (torch's
``SyncBatchNorm`` is GPU-only), so the result equals one process on the global batch.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from multibitq.data import BitwiseCoresetSampler, _as_dataset, _classifier, importance_scores
from multibitq.modules import MultiBitConfig, _check_model, set_bits, using_bits
from multibitq.ops import check_bits

__all__ = ["CORESETS", "METHODS", "TrainHistory", "evaluate", "train_multibit"]

#: Training methods: ours (bit-wise coresets), Any-Precision (recursive distillation, full data),
#: one model per bit-width on full data, and plain joint training (hard labels, full data).
METHODS = ("ours", "anyprecision", "dedicated", "joint")
#: How ``method="ours"`` picks each child's subset: ``"bitwise"`` (the paper: per-child
#: ``cfg.score``), the baselines ``"random"``, ``"el2n"``, ``"entropy"``, ``"forgetting"``,
#: ``"moderate"``, and ``"shared"`` (one subset for all children, scored once at the largest
#: bit-width).
CORESETS = ("bitwise", "random", "el2n", "entropy", "forgetting", "moderate", "shared")


@dataclasses.dataclass
class TrainHistory:
    """What :func:`train_multibit` did and what it cost.

    Attributes:
        method, coreset, bits, epochs, steps: the run.
        subset_size: samples per child per epoch (``k``; ``n`` for full-data methods).
        losses: per-step training loss (summed over children; this rank's share under DDP).
        seconds: wall-clock of the whole training, scoring included.
        score_seconds: wall-clock spent scoring.
        epoch_seconds: wall-clock per epoch (scoring of that epoch included).
        train_passes: per-child forward+backward sample passes (summed over children).
        score_forwards: eval-mode sample forwards spent on scoring.
        teacher_forwards: no-grad sample forwards of a teacher (0: Any-Precision's teacher is the
            previous child's own training forward).
        subsets: with ``method="ours"``, each epoch's ``{bits: sorted indices}``.
        models: the trained model of each bit-width (the same model for every bit-width except
            with ``method="dedicated"``).
    """

    method: str
    coreset: str | None
    bits: tuple[int, ...]
    epochs: int
    steps: int
    subset_size: int
    losses: list[float] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    score_seconds: float = 0.0
    epoch_seconds: list[float] = dataclasses.field(default_factory=list)
    train_passes: int = 0
    score_forwards: int = 0
    teacher_forwards: int = 0
    subsets: list[dict[int, torch.Tensor]] = dataclasses.field(default_factory=list, repr=False)
    models: dict[int, nn.Module] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def sample_pass_equivalents(self) -> float:
        """Training passes plus scoring forwards at a third of a pass (backward ≈ 2× forward)."""
        return self.train_passes + (self.score_forwards + self.teacher_forwards) / 3.0


# ----------------------------------------------------------------------------- distributed


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over ranks: the gradient of a sum is the sum of the gradients."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        out = t.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad)
        return grad


def _all_reduce_autograd(t: torch.Tensor) -> torch.Tensor:
    return _AllReduceSum.apply(t)


class _MomentSyncBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training moments are all-reduced over the process group (CPU-capable).

    Only ever set as the ``__class__`` of an existing ``nn.BatchNorm2d`` for the duration of a
    distributed training run (no new state). The all-reduce is differentiable, so each rank's gradient is the gradient of
    the sum of every rank's loss, as with ``SyncBatchNorm``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, world = _world()
        if not self.training or world == 1:
            return super().forward(x)
        dims = [0, 2, 3]
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)
        dist.all_reduce(count)
        n = count[0]
        mean = _all_reduce_autograd(x.sum(dims)) / n
        centered = x - mean[None, :, None, None]
        var = _all_reduce_autograd(centered.square().sum(dims)) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = (
                    1.0 / float(self.num_batches_tracked)
                    if self.momentum is None
                    else self.momentum
                )
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                unbiased = var.detach() * (n / (n - 1))
                self.running_var.mul_(1 - factor).add_(unbiased, alpha=factor)
        out = centered * torch.rsqrt(var + self.eps)[None, :, None, None]
        if self.affine:
            out = out * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return out


class _synced_batchnorm:
    """Context manager: every plain BatchNorm2d of ``model`` all-reduces its moments inside."""

    def __init__(self, model: nn.Module) -> None:
        self.bns = [m for m in model.modules() if type(m) is nn.BatchNorm2d]

    def __enter__(self) -> None:
        for m in self.bns:
            m.__class__ = _MomentSyncBatchNorm2d

    def __exit__(self, *exc: Any) -> None:
        for m in self.bns:
            m.__class__ = nn.BatchNorm2d


def _gather_rows(local: torch.Tensor, local_index: torch.Tensor, n: int) -> torch.Tensor:
    """Rows computed by each rank on its shard, assembled into dataset order on every rank."""
    _, world = _world()
    if world == 1:
        out = local.new_zeros((n, *local.shape[1:]))
        out[local_index] = local
        return out
    out = local.new_zeros((n, *local.shape[1:]))
    out[local_index] = local
    dist.all_reduce(out)  # shards are disjoint: the sum assembles them
    return out


# ----------------------------------------------------------------------------- scores


def _shard(n: int) -> torch.Tensor:
    rank, world = _world()
    return torch.arange(rank, n, world)


def _logits_and_features(
    model: nn.Module, x: torch.Tensor, bits: int, batch_size: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode logits and classifier inputs of ``x`` at ``bits`` (model mode restored)."""
    classifier = _classifier(model)
    device = classifier.weight.device
    features: list[torch.Tensor] = []
    handle = classifier.register_forward_hook(lambda m, a, o: features.append(a[0].detach()))
    was_training = model.training
    logits = []
    try:
        model.eval()
        with torch.no_grad(), using_bits(model, bits):
            for start in range(0, len(x), batch_size):
                logits.append(model(x[start : start + batch_size].to(device)).cpu())
    finally:
        handle.remove()
        model.train(was_training)
    return torch.cat(logits), torch.cat(features).cpu().reshape(len(x), -1)


def _baseline_scores(
    name: str, logits: torch.Tensor, features: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Scores of the coreset baselines from eval-mode logits and features (higher = keep)."""
    probs = torch.softmax(logits.double(), dim=1)
    if name == "el2n":  # Paul et al. 2021: ‖p − e_y‖
        return (probs - F.one_hot(y, probs.shape[1]).double()).norm(dim=1)
    if name == "entropy":  # predictive entropy (uncertainty sampling)
        return -(probs * probs.clamp_min(1e-300).log()).sum(1)
    if name == "moderate":  # Xia et al. 2023: distance to the class centroid near its median
        h = features.double()
        scores = torch.empty(len(y), dtype=torch.float64)
        for c in torch.unique(y):
            members = y == c
            d = (h[members] - h[members].mean(0)).norm(dim=1)
            scores[members] = 1.0 / (1e-9 + (d - d.median()).abs())
        return scores
    raise AssertionError(name)


class _Forgetting:
    """Per-child forgetting events (Toneva et al. 2019) counted on the training forwards."""

    def __init__(self, bits: Sequence[int], n: int) -> None:
        self.last = {b: torch.zeros(n, dtype=torch.bool) for b in bits}
        self.ever = {b: torch.zeros(n, dtype=torch.bool) for b in bits}
        self.events = {b: torch.zeros(n, dtype=torch.float64) for b in bits}

    def update(self, bits: int, index: torch.Tensor, correct: torch.Tensor) -> None:
        forgotten = self.last[bits][index] & ~correct
        self.events[bits][index] += forgotten.double()
        self.last[bits][index] = correct
        self.ever[bits][index] |= correct

    def scores(self, bits: int) -> torch.Tensor:
        """Forgetting count + 1; never-learned (or never-seen) samples count as most forgotten."""
        events = self.events[bits]
        top = float(events.max()) + 1.0
        return torch.where(self.ever[bits], events, torch.full_like(events, top)) + 1.0


# ----------------------------------------------------------------------------- training


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def _no_buffer_sync() -> dict[str, bool]:
    """DDP must not overwrite running statistics from rank 0: the synced moments keep them equal."""
    import inspect

    params = inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
    return {
        "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers": False
    }


def _tensors(dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = _as_dataset(dataset)
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        x, y = dataset.tensors
    else:
        items = [dataset[i] for i in range(len(dataset))]
        x = torch.stack([torch.as_tensor(a) for a, _ in items])
        y = torch.as_tensor([int(b) for _, b in items])
    return x, y.reshape(-1).long()


def train_multibit(
    model: nn.Module,
    train_set: Any,
    cfg: MultiBitConfig,
    method: str = "ours",
    epochs: int = 30,
    *,
    batch_size: int = 64,
    lr: float = 1e-3,
    coreset: str = "bitwise",
    warmup_epochs: int = 1,
    progress: bool = False,
) -> TrainHistory:
    """Train the multi-bit ``model`` (made by :func:`convert_` with ``cfg``) on ``train_set``.

    Args:
        model: a multi-bit model; trained in place (with ``method="dedicated"`` it becomes the
            model of the largest bit-width and the others are trained copies).
        train_set: a map-style Dataset of ``(x, y)`` with integer labels, or a tuple ``(X, y)``.
        cfg: the bit-widths, correction, pruning rate, score, selection, re-scoring period, seed.
        method: ``"ours"`` (each child on its own coreset of size ``round((1−p)·n)``, hard
            labels), ``"anyprecision"`` (one full-data batch per step, the largest bit-width with
            hard labels, each next child distilled from the previous one), ``"dedicated"`` (one
            model per bit-width, full data) or ``"joint"`` (every child on the same full-data
            batch, hard labels).
        epochs: passes over each child's (sub)set.
        batch_size: samples per child per step (the global batch under DDP).
        lr: Adam's learning rate (cosine decay to 0, no warm-up, no weight decay).
        coreset: with ``method="ours"``, how subsets are scored, one of :data:`CORESETS`.
        warmup_epochs: epochs of uniform random subsets before the first scoring.
        progress: show a progress bar.

    Returns:
        A :class:`TrainHistory` with the costs and the trained model(s).
    """
    from neurips25_core.models import train

    if not isinstance(cfg, MultiBitConfig):
        raise TypeError(f"cfg: expected a MultiBitConfig, got {type(cfg).__name__}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if coreset not in CORESETS:
        raise ValueError(f"coreset: expected one of {CORESETS}, got {coreset!r}")
    _check_model(model)
    epochs = _check_positive_int(epochs, "epochs")
    batch_size = _check_positive_int(batch_size, "batch_size")
    if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, int) or warmup_epochs < 0:
        raise ValueError(f"warmup_epochs: expected an int >= 0, got {warmup_epochs!r}")
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr: expected a finite number > 0, got {lr!r}")
    x_all, y_all = _tensors(train_set)
    n = len(y_all)
    num_classes = _classifier(model).out_features
    if int(y_all.min()) < 0 or int(y_all.max()) >= num_classes:
        raise ValueError(
            f"train_set: labels must lie in [0, {num_classes}), got "
            f"[{int(y_all.min())}, {int(y_all.max())}]"
        )
    if method == "dedicated":
        return _train_dedicated(model, (x_all, y_all), cfg, epochs, batch_size, lr, progress)

    bits = cfg.bits
    rank, world = _world()
    pruned = method == "ours"
    k = round((1 - cfg.prune_rate) * n) if pruned else n
    classes = int(torch.unique(y_all).numel())
    if k < classes:
        raise ValueError(
            f"prune_rate: {cfg.prune_rate} leaves k={k} samples per child of n={n}, fewer than "
            f"the {classes} classes (each class needs one)"
        )
    history = TrainHistory(
        method=method,
        coreset=coreset if pruned else None,
        bits=bits,
        epochs=epochs,
        steps=0,
        subset_size=k,
        models={b: model for b in bits},
    )
    steps_per_epoch = math.ceil(k / batch_size)
    history.steps = steps = epochs * steps_per_epoch
    sampler = None
    if pruned:
        selection = "topk" if coreset == "moderate" else cfg.selection
        sampler = BitwiseCoresetSampler(y_all, k, bits, seed=cfg.seed, selection=selection)
    forgetting = _Forgetting(bits, n) if pruned and coreset == "forgetting" else None
    state: dict[str, Any] = {"epoch": -1, "scores": None, "orders": None, "index": None}
    clock = {"start": None, "epoch_start": None}

    def score_children() -> dict[int, torch.Tensor]:
        started = time.perf_counter()
        shard = _shard(n)
        scores: dict[int, torch.Tensor] = {}
        scored_bits = (bits[0],) if coreset == "shared" else bits
        for b in scored_bits:
            if coreset == "forgetting":
                scores[b] = forgetting.scores(b)
                continue
            if coreset in ("bitwise", "shared"):
                local = importance_scores(
                    model, TensorDataset(x_all[shard], y_all[shard]), b, cfg.score
                ).double()
                scores[b] = _gather_rows(local, shard, n)
            else:
                logits, feats = _logits_and_features(model, x_all[shard], b)
                logits = _gather_rows(logits, shard, n)
                feats = _gather_rows(feats, shard, n)
                scores[b] = _baseline_scores(coreset, logits, feats, y_all)
            history.score_forwards += n
        if coreset == "shared":
            scores = {b: scores[bits[0]] for b in bits}
        history.score_seconds += time.perf_counter() - started
        return scores

    def start_epoch(epoch: int) -> None:
        now = time.perf_counter()
        if clock["epoch_start"] is not None:
            history.epoch_seconds.append(now - clock["epoch_start"])
        clock["epoch_start"] = now
        g = torch.Generator().manual_seed(cfg.seed * 7_919 + epoch)
        if not pruned:
            order = torch.randperm(n, generator=g)
            state["orders"] = {b: order for b in bits}
            return
        after_warmup = epoch - warmup_epochs
        if coreset != "random" and after_warmup >= 0 and after_warmup % cfg.rescore_every == 0:
            state["scores"] = score_children()
        scores = state["scores"] if coreset != "random" else None
        if coreset == "shared":
            subset = sampler.select(bits[0], None if scores is None else scores[bits[0]], epoch)
            subsets = {b: subset for b in bits}
        else:
            subsets = sampler.subsets(scores, round=epoch)
        history.subsets.append(subsets)
        # each child walks its own subset in its own seeded order
        state["orders"] = {b: subsets[b][torch.randperm(k, generator=g)] for b in bits}

    def next_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, i = divmod(step, steps_per_epoch)
        if epoch != state["epoch"]:
            state["epoch"] = epoch
            start_epoch(epoch)
        index = torch.stack(
            [state["orders"][b][i * batch_size : (i + 1) * batch_size] for b in bits]
        )
        global_count = index.shape[1]
        history.train_passes += index.numel()
        local = index[:, rank::world]
        state["global_index"], state["index"] = index, local
        state["norm"] = global_count / world  # so DDP's mean over ranks is the global mean
        return x_all[local], y_all[local]

    def loss_fn(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        norm = state["norm"]
        total = x.new_zeros(())
        previous = None
        for j, b in enumerate(bits):
            set_bits(net, b)
            logits = net(x[j])
            if method == "anyprecision" and previous is not None:
                soft = -(previous * torch.log_softmax(logits, dim=1)).sum(1)
                total = total + soft.sum() / norm
            else:
                total = total + F.cross_entropy(logits, y[j], reduction="sum") / norm
            if method == "anyprecision":
                previous = torch.softmax(logits.detach(), dim=1)
            if forgetting is not None:
                correct = (logits.detach().argmax(1) == y[j]).float().cpu()
                if world > 1:  # every rank records the whole global batch
                    full = correct.new_zeros(state["global_index"].shape[1])
                    full[rank::world] = correct
                    dist.all_reduce(full)
                    forgetting.update(b, state["global_index"][j], full.bool())
                else:
                    forgetting.update(b, state["index"][j], correct.bool())
        set_bits(net, bits[0])
        return total

    net: nn.Module = model
    sync = _synced_batchnorm(model) if world > 1 else None
    started = time.perf_counter()
    try:
        if sync is not None:
            sync.__enter__()
            net = nn.parallel.DistributedDataParallel(model, **_no_buffer_sync())
        result = train(
            net,
            next_batch,
            steps,
            optimizer=lambda params: torch.optim.Adam(params, lr=lr),
            lr=lr,
            weight_decay=0.0,
            warmup=0,
            min_lr_ratio=0.0,
            grad_clip=None,
            seed=cfg.seed,
            loss_fn=loss_fn,
            progress=progress,
            desc=f"multibitq {method}",
        )
    finally:
        if sync is not None:
            sync.__exit__()
        set_bits(model, bits[0])
    history.seconds = time.perf_counter() - started
    if clock["epoch_start"] is not None:
        history.epoch_seconds.append(time.perf_counter() - clock["epoch_start"])
    history.losses = result.losses
    return history


def _train_dedicated(
    model: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    cfg: MultiBitConfig,
    epochs: int,
    batch_size: int,
    lr: float,
    progress: bool,
) -> TrainHistory:
    """One model per bit-width on full data (joint training of a single child)."""
    bits = cfg.bits
    initial = copy.deepcopy(model)
    history = TrainHistory(
        method="dedicated",
        coreset=None,
        bits=bits,
        epochs=epochs,
        steps=0,
        subset_size=len(data[1]),
    )
    for j, b in enumerate(bits):
        child = model if j == 0 else copy.deepcopy(initial)
        one = dataclasses.replace(cfg, bits=(b,))
        h = train_multibit(
            child, data, one, "joint", epochs, batch_size=batch_size, lr=lr, progress=progress
        )
        set_bits(child, b)
        history.models[b] = child
        history.steps += h.steps
        history.losses += h.losses
        history.seconds += h.seconds
        history.train_passes += h.train_passes
        history.epoch_seconds = [
            a + c
            for a, c in zip(history.epoch_seconds or [0.0] * epochs, h.epoch_seconds, strict=False)
        ]
    return history


def evaluate(
    model: nn.Module, data: Any, bits: int | Iterable[int] | None = None, batch_size: int = 512
) -> float | dict[int, float]:
    """Top-1 accuracy of ``model`` on ``data`` (eval mode, no calibration).

    Args:
        model: a multi-bit model.
        data: a labeled Dataset, a tuple ``(X, y)`` of tensors, or an iterable of ``(x, y)``
            batches.
        bits: a bit-width (returns a float), several (returns ``{bits: accuracy}``), or ``None``
            for the model's current bit-width.
        batch_size: samples per forward (datasets only).

    Example:
        >>> from multibitq import MultiBitConfig, convert_, resnet_multibit
        >>> model = convert_(resnet_multibit(8, 1, 10, 4), MultiBitConfig())
        >>> 0.0 <= evaluate(model, (torch.randn(6, 1, 8, 8), torch.arange(6)), bits=3) <= 1.0
        True
    """
    _check_model(model)
    batch_size = _check_positive_int(batch_size, "batch_size")
    if bits is not None and not isinstance(bits, int):
        if isinstance(bits, (str, bytes)) or not isinstance(bits, Iterable):
            raise TypeError(f"bits: expected an int, a sequence of ints or None, got {bits!r}")
        return {int(b): evaluate(model, data, int(b), batch_size) for b in bits}
    if bits is not None:
        bits = check_bits(bits)
    is_pair = (
        isinstance(data, tuple)
        and len(data) == 2
        and all(isinstance(t, torch.Tensor) for t in data)
    )
    if is_pair or isinstance(data, Dataset):
        x, y = _tensors(data)
        batches: Iterable[Any] = [
            (x[s : s + batch_size], y[s : s + batch_size]) for s in range(0, len(y), batch_size)
        ]
    else:
        batches = data
    was_training = model.training
    device = next(model.parameters()).device
    correct = total = 0
    try:
        model.eval()
        with torch.no_grad():
            ctx = using_bits(model, bits) if bits is not None else _nullcontext()
            with ctx:
                for xb, yb in batches:
                    pred = model(xb.to(device)).argmax(1).cpu()
                    correct += int((pred == torch.as_tensor(yb).reshape(-1)).sum())
                    total += len(pred)
    finally:
        model.train(was_training)
    if total == 0:
        raise ValueError("data: yielded no sample")
    return correct / total


def _nullcontext():
    import contextlib

    return contextlib.nullcontext()


def train_classifier(
    model: nn.Module,
    train_set: Any,
    epochs: int,
    *,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
) -> TrainHistory:
    """Train any classifier (a peer's QAT model) with the recipe of :func:`train_multibit`'s one-child
    ``"joint"``/``"dedicated"`` run: the same seeded epoch orders, Adam(lr) with cosine decay to 0,
    no warm-up, no weight decay, no clipping, cross-entropy over the batch.

    A one-bit-width multi-bit model trained here equals ``train_multibit(..., "joint")`` bit for
    bit (tests/test_peers.py), so a peer arm trained here gets exactly Dedicated's budget.

    Returns:
        A :class:`TrainHistory` (``method="classifier"``; ``models`` is empty).
    """
    from neurips25_core.models import train

    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    epochs = _check_positive_int(epochs, "epochs")
    batch_size = _check_positive_int(batch_size, "batch_size")
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr: expected a finite number > 0, got {lr!r}")
    x_all, y_all = _tensors(train_set)
    n = len(y_all)
    steps_per_epoch = math.ceil(n / batch_size)
    history = TrainHistory(
        method="classifier",
        coreset=None,
        bits=(),
        epochs=epochs,
        steps=epochs * steps_per_epoch,
        subset_size=n,
    )
    state: dict[str, Any] = {"epoch": -1, "order": None}

    def next_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, i = divmod(step, steps_per_epoch)
        if epoch != state["epoch"]:
            state["epoch"] = epoch
            g = torch.Generator().manual_seed(seed * 7_919 + epoch)
            state["order"] = torch.randperm(n, generator=g)
        index = state["order"][i * batch_size : (i + 1) * batch_size]
        history.train_passes += index.numel()
        return x_all[index], y_all[index]

    def loss_fn(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(net(x), y, reduction="sum") / len(y)

    started = time.perf_counter()
    result = train(
        model,
        next_batch,
        history.steps,
        optimizer=lambda params: torch.optim.Adam(params, lr=lr),
        lr=lr,
        weight_decay=0.0,
        warmup=0,
        min_lr_ratio=0.0,
        grad_clip=None,
        seed=seed,
        loss_fn=loss_fn,
        progress=progress,
        desc="classifier",
    )
    history.seconds = time.perf_counter() - started
    history.losses = result.losses
    return history
