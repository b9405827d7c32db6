"""Tiny transformers models built from a config, a training loop, bits-per-byte evaluation and a cache.

Nothing is downloaded: models are ``LlamaForCausalLM`` instances built from a ``LlamaConfig`` with
byte vocabulary (256), trained here on :func:`neurips25_core.data.stdlib_corpus`. Several
benchmarks start from the same pretrained model, so :func:`pretrained_tiny_llama` trains it once
and caches the weights on disk, keyed by the config, the corpus fingerprint and the training
arguments (directory ``$NEURIPS25_CACHE``, default ``~/.cache/neurips25``). Every package caches
what it trains through the same helper, :func:`cached_checkpoint`: the key covers every argument,
the data and the library versions, a file lock makes concurrent callers wait for the first one
instead of training twice, and writes are atomic (a killed writer leaves nothing that loads).

:func:`train` always trains: it runs under ``torch.enable_grad()``, so a caller inside
``torch.no_grad()`` (a benchmark case that evaluates, say) still gets a trained model.

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
import inspect
import json
import math
import os
import sys
import tempfile
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
    "cache_key",
    "cached_checkpoint",
    "causal_lm_loss",
    "evaluate_bpb",
    "pretrained_tiny_llama",
    "pretrained_tiny_llama_for",
    "tiny_llama",
    "tiny_llama_config",
    "train",
    "train_arguments",
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


# Published Llama shapes (the models' config.json), for random-weight GPU benchmarks: no weights are
# downloaded, only the shape is reproduced.
LLAMA_SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": dict(
        vocab_size=128_256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131_072,
        rope_theta=500_000.0,
        tie_word_embeddings=True,
    ),
    "llama-3.1-8b": dict(
        vocab_size=128_256,
        hidden_size=4096,
        intermediate_size=14_336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131_072,
        rope_theta=500_000.0,
        tie_word_embeddings=False,
    ),
}


def llama_shape_config(name: str, **overrides: Any):
    """A ``LlamaConfig`` with the shape of a published Llama (``LLAMA_SHAPES``), fields overridable.

    Example:
        >>> cfg = llama_shape_config("llama-3.2-1b", max_position_embeddings=2048)
        >>> cfg.hidden_size, cfg.num_key_value_heads, cfg.max_position_embeddings
        (2048, 8, 2048)
    """
    from transformers import LlamaConfig

    if name not in LLAMA_SHAPES:
        raise ValueError(f"name: expected one of {sorted(LLAMA_SHAPES)}, got {name!r}")
    return LlamaConfig(**{**LLAMA_SHAPES[name], **overrides})


def benchmark_llama(
    toy: bool,
    device="cpu",
    dtype: torch.dtype = torch.float32,
    *,
    shape: str = "llama-3.2-1b",
    max_position_embeddings: int = 2048,
    seed: int = 0,
) -> nn.Module:
    """A random-weight ``LlamaForCausalLM`` in eval mode for ``benchmarks/gpu.py`` scripts: the
    published ``shape`` (``LLAMA_SHAPES``) or, with ``toy``, a CPU-testable miniature of it (hidden
    64, 2 layers, 4 / 2 heads, MLP 128, 260 tokens, 256 positions). Seeded; the global RNG is
    untouched."""
    if toy:
        config = tiny_llama_config(
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=128,
            vocab_size=260,
            max_position_embeddings=256,
        )
    else:
        config = llama_shape_config(shape, max_position_embeddings=max_position_embeddings)
    return tiny_llama(config, seed=seed).to(device=device, dtype=dtype).eval()


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
    if not (isinstance(min_lr_ratio, (int, float)) and 0.0 <= min_lr_ratio <= 1.0):
        raise ValueError(f"min_lr_ratio: expected a number in [0, 1], got {min_lr_ratio!r}")
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
    from neurips25_core.progress import progress_bar

    return progress_bar(total=total, desc=desc, leave=False)


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

    Training runs under ``torch.enable_grad()``: an outer ``torch.no_grad()`` or
    ``torch.inference_mode()`` cannot silently turn it off.

    Returns:
        A :class:`TrainResult`.
    """
    if torch.is_inference_mode_enabled():
        # Tensors created under inference mode can never take part in autograd; enable_grad does
        # not undo it, so leave it explicitly for the whole loop.
        with torch.inference_mode(False):
            return train(**_locals_for_train(locals()))
    with torch.enable_grad():
        return _train(**_locals_for_train(locals()))


def _locals_for_train(scope: dict[str, Any]) -> dict[str, Any]:
    return {k: scope[k] for k in inspect.signature(train).parameters}


def _train(
    model: nn.Module,
    data: Corpus | Callable[[int], Batch],
    steps: int,
    optimizer,
    lr: float,
    weight_decay: float,
    warmup: int | None,
    min_lr_ratio: float,
    batch_size: int,
    seq_len: int,
    grad_clip: float | None,
    seed: int,
    loss_fn,
    progress: bool,
    desc: str,
    eval_every: int,
    eval_batches: int,
    schedule: bool,
) -> TrainResult:
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr: expected a finite number >= 0, got {lr!r}")
    if not isinstance(weight_decay, (int, float)) or not math.isfinite(weight_decay):
        raise ValueError(f"weight_decay: expected a finite number, got {weight_decay!r}")
    if not (isinstance(min_lr_ratio, (int, float)) and 0.0 <= min_lr_ratio <= 1.0):
        raise ValueError(f"min_lr_ratio: expected a number in [0, 1], got {min_lr_ratio!r}")
    if grad_clip is not None and not (math.isfinite(grad_clip) and grad_clip > 0):
        raise ValueError(f"grad_clip: expected a finite number > 0 or None, got {grad_clip!r}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected an int >= 1, got {seq_len!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(data, Corpus) and max_pos is not None and seq_len > max_pos:
        raise ValueError(
            f"seq_len: {seq_len} exceeds the model's max_position_embeddings={max_pos}"
        )
    if eval_every and not isinstance(data, Corpus):
        raise ValueError("eval_every: validation needs data to be a Corpus")
    loss_fn = loss_fn or causal_lm_loss
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: no parameter requires grad, so there is nothing to train")
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
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_TRAIN_SKIP = {"model", "data", "progress", "desc"}


def _describe(value: Any) -> Any:
    """A JSON-able description of an argument: callables by qualified name, configs by their dict."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, Corpus):
        return {"corpus": value.fingerprint}
    if hasattr(value, "to_diff_dict"):
        return value.to_diff_dict()
    if isinstance(value, torch.optim.Optimizer):
        return {"optimizer": type(value).__qualname__, "defaults": _describe(value.defaults)}
    if callable(value):
        mod = getattr(value, "__module__", "?")
        return f"{mod}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    if isinstance(value, torch.Tensor):
        return {"tensor": list(value.shape), "dtype": str(value.dtype)}
    return repr(value)


def train_arguments(**kwargs: Any) -> dict[str, Any]:
    """Every argument :func:`train` would use, defaults filled in, as a JSON-able dict for a cache key.

    ``model``, ``data``, ``progress`` and ``desc`` are left out (the model config and the data
    fingerprint belong in the key separately; the bar does not change the result). A callable
    (optimizer factory, loss) is named by its qualified name, so a changed factory needs a
    changed name or a ``version`` in the key.

    Example:
        >>> a = train_arguments(steps=10)
        >>> b = train_arguments(steps=10, weight_decay=0.0)
        >>> a["weight_decay"], b["weight_decay"], a["warmup"]
        (0.1, 0.0, None)
    """
    unknown = set(kwargs) - set(inspect.signature(train).parameters)
    if unknown:
        raise TypeError(f"train_arguments: train() has no argument(s) {sorted(unknown)}")
    bound = inspect.signature(train).bind_partial(**kwargs)
    bound.apply_defaults()
    return {k: _describe(v) for k, v in bound.arguments.items() if k not in _TRAIN_SKIP}


def cache_key(key_parts: dict[str, Any]) -> str:
    """The 16-hex-digit key of ``key_parts`` plus the torch and transformers versions."""
    import transformers

    described = _describe(dict(key_parts))
    described["_versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_checkpoint(
    name: str,
    key_parts: dict[str, Any],
    build: Callable[[], tuple[Any, dict[str, Any]]],
    root: str | Path | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Build something once (a trained state dict, say), cache it on disk, load it afterwards.

    The file is ``<root>/<name>-<key>.pt`` where the key hashes ``key_parts`` (put every argument
    that changes the result in it: the model config, the data fingerprint, ``train_arguments(...)``,
    the seed) together with the torch and transformers versions. A file lock serialises callers,
    so concurrent processes (pytest-xdist workers, two benchmarks) wait for the first build
    instead of repeating it. The payload is written to a temporary file in the same folder,
    flushed to disk, then renamed into place: a writer killed half-way leaves only a stray
    temporary file, never a checkpoint that loads.

    Args:
        name: a file-name prefix (``"tiny_llama"``, ``"andpro_longctx"``): letters, digits, ``_-.``.
        key_parts: JSON-able description of everything the payload depends on.
        build: ``() -> (payload, meta)``; the payload is loaded back with ``weights_only=True``,
            so it must be tensors, dicts, lists and plain numbers/strings (a ``state_dict``).
            ``meta`` is a JSON-able dict (losses, seconds) stored beside it.
        root: the cache folder (default :func:`cache_dir`).

    Returns:
        ``(payload, meta)``; ``meta["key"]`` is the cache key, ``meta["cached"]`` whether it was
        loaded rather than built in this call.
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"name: expected letters, digits and _-. only, got {name!r}")
    if not isinstance(key_parts, dict):
        raise TypeError(f"key_parts: expected a dict, got {type(key_parts).__name__}")
    folder = Path(root) if root is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    key = cache_key({"name": name, **key_parts})
    path = folder / f"{name}-{key}.pt"
    with _file_lock(folder / f"{name}-{key}.lock"):
        if path.exists():
            try:
                blob = torch.load(path, map_location="cpu", weights_only=True)
                meta = json.loads(blob["meta"])
                meta["cached"] = True
                return blob["payload"], meta
            except Exception as exc:  # a file from an older layout or a damaged disk: rebuild
                print(
                    f"cached_checkpoint: {path} does not load ({type(exc).__name__}: {exc}); "
                    "rebuilding it",
                    file=sys.stderr,
                )
        payload, meta = build()
        if not isinstance(meta, dict):
            raise TypeError(f"build: expected (payload, dict), got meta {type(meta).__name__}")
        meta = {**meta, "key": key, "key_parts": _describe(dict(key_parts))}
        blob = {"payload": payload, "meta": json.dumps(meta, default=str)}
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-{key}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(blob, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        meta["cached"] = False
        return payload, meta


def pretrained_tiny_llama(
    config=None,
    steps: int = 600,
    seed: int = 0,
    batch_size: int = 16,
    seq_len: int = 128,
    lr: float = 3e-3,
    corpus: Corpus | None = None,
    progress: bool = True,
    **train_kwargs: Any,
) -> nn.Module:
    """A tiny Llama trained on the stdlib corpus, loaded from the on-disk cache when present.

    Cached through :func:`cached_checkpoint`: the key covers the config, the corpus fingerprint,
    every argument of :func:`train` (defaults included) and the library versions, so a change to
    any of them trains a new model. Training metadata (final loss, validation bits/byte, seconds)
    is attached as ``model.neurips25_meta``. Works under ``torch.no_grad()`` on an empty cache.

    Args:
        config: a ``LlamaConfig`` (default :func:`tiny_llama_config`).
        steps, seed, batch_size, seq_len, lr: passed to :func:`train` (``seed`` also seeds the init).
        corpus: the training corpus (default :func:`stdlib_corpus`).
        progress: show a bar while training.
        **train_kwargs: any other :func:`train` argument (``weight_decay``, ``warmup``, ...).

    Returns:
        The model in eval mode on CPU.
    """
    config = config if config is not None else tiny_llama_config()
    corpus = corpus if corpus is not None else stdlib_corpus()
    args = dict(steps=steps, seed=seed, batch_size=batch_size, seq_len=seq_len, lr=lr)
    args.update(train_kwargs)
    model = tiny_llama(config, seed=seed)

    def build():
        res = train(model, corpus, progress=progress, desc="pretrain tiny llama", **args)
        tail = res.losses[-20:]
        meta = {
            "steps": steps,
            "final_train_loss": sum(tail) / len(tail),
            "val_bpb": evaluate_bpb(model, corpus, seq_len=seq_len),
            "seconds": res.seconds,
        }
        return model.state_dict(), meta

    state, meta = cached_checkpoint(
        "tiny_llama",
        {
            "config": config,
            "data": corpus.fingerprint,
            "init_seed": seed,
            "train": train_arguments(**args),
            "version": 2,
        },
        build,
    )
    if meta["cached"]:
        model.load_state_dict(state)
    model.eval()
    model.neurips25_meta = meta
    return model


#: The tiny Llama each mode starts from: a toy one that trains in about a second for ``smoke``, the
#: standard 0.87M-parameter one (600 steps, about two minutes on two cores, cached) otherwise.
SMOKE_LLAMA = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "max_position_embeddings": 1024}


def pretrained_tiny_llama_for(mode: str, progress: bool = True, **overrides: Any) -> nn.Module:
    """The pretrained tiny Llama for a benchmark mode (``ctx.mode``): toy-sized in ``smoke`` mode.

    ``smoke`` trains a 2-layer width-32 model for 30 steps (batch 4, 64 bytes): a real, cached
    model in about a second, so a smoke case on an empty cache exercises the same code path as
    the full run. ``quick`` and ``full`` return :func:`pretrained_tiny_llama`'s default model.
    ``overrides`` go to :func:`pretrained_tiny_llama` in every mode.
    """
    if mode not in ("smoke", "quick", "full"):
        raise ValueError(f"mode: expected 'smoke', 'quick' or 'full', got {mode!r}")
    if mode == "smoke":
        args: dict[str, Any] = {
            "config": tiny_llama_config(**SMOKE_LLAMA),
            "steps": 30,
            "batch_size": 4,
            "seq_len": 64,
        }
        args.update(overrides)
        from neurips25_core.bench import single_thread

        # A width-32 model is all thread synchronisation: one thread is several times faster,
        # and far faster again on a loaded machine.
        with single_thread():
            return pretrained_tiny_llama(progress=progress, **args)
    return pretrained_tiny_llama(progress=progress, **overrides)
