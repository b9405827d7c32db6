"""Tiny transformers models built from a config, a training loop, bits-per-byte evaluation and a cache.

Nothing is downloaded: models are ``LlamaForCausalLM`` instances built from a ``LlamaConfig`` with
byte vocabulary (256), trained here on :func:`neurips25_core.data.stdlib_corpus`. Several
benchmarks start from the same pretrained model, so :func:`pretrained_tiny_llama` trains it once
and caches the weights on disk, keyed by the config, the corpus fingerprint and the training
arguments (directory ``$NEURIPS25_CACHE``, default ``~/.cache/neurips25``); a file lock makes
concurrent callers wait for the first one instead of training twice.

Example (CPU, a few seconds):

    >>> from neurips25_core.data import stdlib_corpus
    >>> from neurips25_core.models import tiny_llama, train, evaluate_bpb
    >>> corpus = stdlib_corpus()
    >>> model = tiny_llama(seed=0)
    >>> result = train(model, corpus, steps=20, progress=False)
    >>> bpb = evaluate_bpb(model, corpus, num_batches=2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from neurips25_core.data import Corpus, stdlib_corpus

__all__ = [
    "TrainResult",
    "cache_dir",
    "causal_lm_loss",
    "evaluate_bpb",
    "pretrained_tiny_llama",
    "tiny_llama",
    "tiny_llama_config",
    "train",
    "warmup_cosine",
]

Batch = tuple[torch.Tensor, torch.Tensor]


def tiny_llama_config(
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int = 256,
    max_position_embeddings: int = 1024,
    **overrides: Any,
):
    """A small ``LlamaConfig`` (byte vocabulary by default).

    Args:
        hidden_size: model width; must be divisible by ``num_heads``.
        num_layers: decoder layers.
        num_heads: attention (query) heads.
        num_kv_heads: key/value heads (GQA when fewer than ``num_heads``); default ``num_heads``.
        intermediate_size: MLP width; default ``round(8/3·hidden_size)`` to a multiple of 32.
        vocab_size: 256 for the byte corpus.
        max_position_embeddings: longest sequence.
        **overrides: any other ``LlamaConfig`` field.
    """
    from transformers import LlamaConfig

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size: {hidden_size} is not divisible by num_heads={num_heads}")
    kv = num_kv_heads or num_heads
    if num_heads % kv:
        raise ValueError(f"num_kv_heads: {kv} does not divide num_heads={num_heads}")
    if intermediate_size is None:
        intermediate_size = int(math.ceil(8 * hidden_size / 3 / 32) * 32)
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=kv,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def tiny_llama(config=None, seed: int = 0) -> nn.Module:
    """A randomly initialised ``LlamaForCausalLM`` from ``config`` (default :func:`tiny_llama_config`)."""
    from transformers import LlamaForCausalLM

    config = config if config is not None else tiny_llama_config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def causal_lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of a model whose output has ``.logits`` or is the logits."""
    out = model(x)
    logits = out.logits if hasattr(out, "logits") else out
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup: int, min_lr_ratio: float = 0.1
):
    """``LambdaLR``: linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr_ratio``·lr."""
    if total_steps < 1:
        raise ValueError(f"total_steps: expected >= 1, got {total_steps}")
    if not 0 <= warmup <= total_steps:
        raise ValueError(f"warmup: expected in [0, {total_steps}], got {warmup}")

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (
            1 + math.cos(math.pi * min(progress, 1.0))
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` measured: per-step training loss (nats), validation bits/byte over time."""

    losses: list[float]
    val_bpb: list[tuple[int, float]]
    tokens: int
    seconds: float
    lrs: list[float] = dataclasses.field(default_factory=list)


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def train(
    model: nn.Module,
    data: Corpus | Callable[[int], Batch],
    steps: int,
    optimizer: torch.optim.Optimizer | Callable[[Any], torch.optim.Optimizer] | None = None,
    lr: float = 3e-3,
    weight_decay: float = 0.1,
    warmup: int | None = None,
    min_lr_ratio: float = 0.1,
    batch_size: int = 16,
    seq_len: int = 128,
    grad_clip: float | None = 1.0,
    seed: int = 0,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    progress: bool = True,
    desc: str = "train",
    eval_every: int = 0,
    eval_batches: int = 10,
    schedule: bool = True,
) -> TrainResult:
    """Train ``model`` for ``steps`` steps with warm-up + cosine LR and optional gradient clipping.

    Args:
        model: any module; by default its loss is the causal-LM cross-entropy of ``model(x).logits``.
        data: a :class:`Corpus` (random training windows) or a callable ``step -> (x, y)``.
        steps: optimizer steps.
        optimizer: an optimizer instance, a factory ``params -> optimizer``, or None for AdamW(lr,
            weight_decay, betas=(0.9, 0.95)).
        lr: peak learning rate for the default AdamW (instances keep their own).
        warmup: warm-up steps (default 10 % of ``steps``).
        min_lr_ratio: final LR as a fraction of the peak.
        grad_clip: max global gradient norm, or None for no clipping.
        seed: seeds the batch order.
        loss_fn: ``loss_fn(model, x, y) -> scalar`` for models that are not HF causal LMs.
        progress: show a tqdm bar.
        eval_every: evaluate validation bits/byte every this many steps (0: never; needs a Corpus).
        schedule: False keeps the optimizer's LR constant.

    Returns:
        A :class:`TrainResult`.
    """
    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    if grad_clip is not None and grad_clip <= 0:
        raise ValueError(f"grad_clip: expected > 0 or None, got {grad_clip}")
    if eval_every and not isinstance(data, Corpus):
        raise ValueError("eval_every: validation needs data to be a Corpus")
    loss_fn = loss_fn or causal_lm_loss
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    elif isinstance(optimizer, torch.optim.Optimizer):
        opt = optimizer
    else:
        opt = optimizer(params)
    warmup = max(1, steps // 10) if warmup is None else warmup
    sched = warmup_cosine(opt, steps, warmup, min_lr_ratio) if schedule else None
    device = next(model.parameters()).device
    if isinstance(data, Corpus):
        gen = torch.Generator().manual_seed(seed)

        def next_batch(step: int) -> Batch:
            return data.get_batch("train", batch_size, seq_len, generator=gen)
    else:
        next_batch = data

    result = TrainResult(losses=[], val_bpb=[], tokens=0, seconds=0.0)
    model.train()
    start = time.perf_counter()
    with _progress(steps, desc, progress) as bar:
        for step in range(steps):
            x, y = next_batch(step)
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model, x, y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"train: loss became {loss.item()} at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            result.lrs.append(opt.param_groups[0]["lr"])
            if sched is not None:
                sched.step()
            result.losses.append(loss.item())
            result.tokens += y.numel()
            if eval_every and (step + 1) % eval_every == 0:
                result.val_bpb.append(
                    (step + 1, evaluate_bpb(model, data, num_batches=eval_batches, loss_fn=loss_fn))
                )
                model.train()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
    result.seconds = time.perf_counter() - start
    model.eval()
    return result


@torch.no_grad()
def evaluate_bpb(
    model: nn.Module,
    corpus: Corpus,
    split: str = "val",
    batch_size: int = 16,
    seq_len: int = 128,
    num_batches: int = 20,
    seed: int = 0,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> float:
    """Bits per byte on ``num_batches`` seeded random windows of ``split`` (same windows every call)."""
    if num_batches < 1:
        raise ValueError(f"num_batches: expected >= 1, got {num_batches}")
    loss_fn = loss_fn or causal_lm_loss
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = 0.0
    for x, y in corpus.batches(split, batch_size, seq_len, seed=seed, num_batches=num_batches):
        total += float(loss_fn(model, x.to(device), y.to(device)))
    model.train(was_training)
    return total / num_batches / math.log(2)


def cache_dir() -> Path:
    """Where trained checkpoints are cached: ``$NEURIPS25_CACHE`` or ``~/.cache/neurips25``."""
    path = Path(os.environ.get("NEURIPS25_CACHE", Path.home() / ".cache" / "neurips25"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pretrained_tiny_llama(
    config=None,
    steps: int = 600,
    seed: int = 0,
    batch_size: int = 16,
    seq_len: int = 128,
    lr: float = 3e-3,
    corpus: Corpus | None = None,
    progress: bool = True,
) -> nn.Module:
    """A tiny Llama trained on the stdlib corpus, loaded from the on-disk cache when present.

    The cache key hashes the config, the corpus fingerprint and every training argument, so a
    change to any of them trains a new model. Training metadata (final loss, validation bits/byte,
    seconds) is stored beside the weights and attached as ``model.neurips25_meta``.

    Returns:
        The model in eval mode on CPU.
    """
    config = config if config is not None else tiny_llama_config()
    corpus = corpus if corpus is not None else stdlib_corpus()
    key_src = json.dumps(
        {
            "config": config.to_diff_dict() if hasattr(config, "to_diff_dict") else str(config),
            "corpus": corpus.fingerprint,
            "steps": steps,
            "seed": seed,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "lr": lr,
            "version": 1,
        },
        sort_keys=True,
        default=str,
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    root = cache_dir()
    weights = root / f"tiny_llama-{key}.pt"
    meta_path = root / f"tiny_llama-{key}.json"
    with _file_lock(root / f"tiny_llama-{key}.lock"):
        model = tiny_llama(config, seed=seed)
        if weights.exists() and meta_path.exists():
            model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            meta = json.loads(meta_path.read_text())
        else:
            res = train(
                model,
                corpus,
                steps,
                lr=lr,
                batch_size=batch_size,
                seq_len=seq_len,
                seed=seed,
                progress=progress,
                desc=f"pretrain tiny llama {key}",
            )
            meta = {
                "key": key,
                "steps": steps,
                "final_train_loss": sum(res.losses[-20:]) / len(res.losses[-20:]),
                "val_bpb": evaluate_bpb(model, corpus, seq_len=seq_len),
                "seconds": res.seconds,
                "spec": json.loads(key_src),
            }
            tmp = weights.with_suffix(".tmp")
            torch.save(model.state_dict(), tmp)
            tmp.replace(weights)
            meta_path.write_text(json.dumps(meta, indent=2, default=str))
    model.eval()
    model.neurips25_meta = meta
    return model
