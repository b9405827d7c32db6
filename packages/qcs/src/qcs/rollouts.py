"""LoRA rollouts on a byte-level causal LM: the ``train_fn``/``eval_fn`` pair of :class:`~qcs.QCSSelector`.

:class:`LoRARollouts` wraps a *copy* of a base model (the caller's model is never modified) with
``peft`` LoRA adapters (r = 8 on ``q_proj``/``v_proj`` by default, as the paper does) and exposes

* ``train_fn(weights [n, T]) -> model``: reset the adapters to their initial values (every
  rollout starts from the same point), then ``steps`` AdamW steps on the pool with the elastic
  token weights ``c`` placed on the response tokens (:func:`~qcs.weighted_response_loss`,
  ``Σ c ℓ / Σ c`` per batch). Each step takes ``batch_size`` distinct rows drawn from the rows
  whose weights are not all zero, with torch's global RNG: under the selector's per-step seed all
  K rollouts draw the same batch positions (common random numbers). All-zero weights train
  nothing and return the start model.
* ``eval_fn(model) -> float``: the mean response-token loss (nats/byte) on the target set,
  the outer objective ``F`` of targeted instruction tuning (the LESS protocol).

The returned model is the one wrapped model, reset by the next ``train_fn`` call; deep-copy it to
keep it. Only the adapter parameters train; the base weights are frozen (peft) and a test checks
they are untouched.

Example (CPU, a second):

    >>> from neurips25_core.models import tiny_llama, tiny_llama_config
    >>> from qcs.tasks import make_instruction_pool, make_target_set
    >>> base = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2))
    >>> ro = LoRARollouts(base, make_instruction_pool(8), make_target_set(4), steps=2, batch_size=4)
    >>> model = ro.train_fn(torch.ones(ro.n, ro.max_tokens))
    >>> f = ro.eval_fn(model)
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from .ops import _check_int, _check_tensor, per_token_loss, weighted_response_loss
from .tasks import encode_pairs

__all__ = [
    "LoRARollouts",
    "as_encoding",
    "expand_token_weights",
    "mean_token_loss",
    "response_token_losses",
]

_ENC_KEYS = ("input_ids", "labels", "token_lengths", "response_start")


def as_encoding(data, name: str = "data") -> dict[str, torch.Tensor]:
    """``data`` as :func:`~qcs.tasks.encode_pairs`'s dict (a list of pairs is encoded)."""
    if isinstance(data, dict):
        missing = [k for k in _ENC_KEYS if k not in data]
        if missing:
            raise ValueError(f"{name}: encoding lacks {missing} (use qcs.tasks.encode_pairs)")
        return data
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        if not data:
            raise ValueError(f"{name}: expected at least one pair")
        return encode_pairs(list(data))
    raise TypeError(
        f"{name}: expected a list of InstructionPair or an encode_pairs dict, got {type(data).__name__}"
    )


def expand_token_weights(
    weights: torch.Tensor, response_start: torch.Tensor, token_lengths: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Place per-response-token weights ``[n, T]`` on label positions ``[n, seq_len]``.

    Token ``j`` of sequence ``i`` is label position ``response_start[i] + j`` (``j < T_i``);
    everything else gets 0: weights beyond ``T_i`` (padding) are ignored.
    """
    _check_tensor(weights, "weights", ndim=2, floating=True)
    n, T = weights.shape
    if response_start.shape != (n,) or token_lengths.shape != (n,):
        raise ValueError(
            f"weights: {n} rows, but response_start/token_lengths have shapes "
            f"{tuple(response_start.shape)}/{tuple(token_lengths.shape)}"
        )
    j = torch.arange(T)
    real = j[None, :] < token_lengths[:, None]
    pos = response_start[:, None] + j[None, :]
    if bool((pos.masked_select(real) >= seq_len).any()):
        raise ValueError(f"seq_len: {seq_len} is shorter than the response layout")
    out = torch.zeros(n, seq_len + T, dtype=weights.dtype)
    out.scatter_(1, torch.where(real, pos, seq_len + j[None, :]), weights * real)
    return out[:, :seq_len]


class LoRARollouts:
    """LoRA fine-tuning rollouts on ``pool`` scored on ``target`` (see the module docstring).

    Args:
        base_model: a causal LM whose forward takes ``input_ids`` and returns ``.logits``
            (``transformers`` Llama from :mod:`neurips25_core.models`); copied, never modified.
        pool: the training pool, a list of :class:`~qcs.tasks.InstructionPair` or its
            :func:`~qcs.tasks.encode_pairs` dict.
        target: the target validation set (same forms); ``eval_fn`` is its mean response loss.
        steps: AdamW steps per rollout (the issue's reduced run: 10).
        batch_size: rows per step (fewer when fewer rows are selected).
        lr, weight_decay: AdamW.
        r, lora_alpha, lora_dropout, target_modules: the ``peft.LoraConfig``.
        eval_batch_size: rows per forward in ``eval_fn``.
        seed: seeds the adapters' initialisation (the shared start point).
    """

    def __init__(
        self,
        base_model: nn.Module,
        pool,
        target,
        *,
        steps: int = 10,
        batch_size: int = 16,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        r: int = 8,
        lora_alpha: int = 16,
        lora_dropout: float = 0.0,
        target_modules: tuple[str, ...] = ("q_proj", "v_proj"),
        eval_batch_size: int = 64,
        seed: int = 0,
    ) -> None:
        if not isinstance(base_model, nn.Module):
            raise TypeError(f"base_model: expected an nn.Module, got {type(base_model).__name__}")
        _check_int(steps, "steps", 1)
        _check_int(batch_size, "batch_size", 1)
        _check_int(eval_batch_size, "eval_batch_size", 1)
        _check_int(r, "r", 1)
        for name, val in (("lr", lr), ("weight_decay", weight_decay)):
            if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
                raise TypeError(f"{name}: expected a finite float, got {val!r}")
        if lr <= 0:
            raise ValueError(f"lr: must be > 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
        if not 0.0 <= lora_dropout < 1.0:
            raise ValueError(f"lora_dropout: must lie in [0, 1), got {lora_dropout}")
        names = {n.rsplit(".", 1)[-1] for n, _ in base_model.named_modules()}
        absent = [m for m in target_modules if m not in names]
        if not target_modules or absent:
            raise ValueError(
                f"target_modules: {list(target_modules)} not all found in base_model (missing {absent})"
            )
        self.pool = as_encoding(pool, "pool")
        self.target = as_encoding(target, "target")
        self.steps, self.batch_size, self.eval_batch_size = steps, batch_size, eval_batch_size
        self.lr, self.weight_decay = float(lr), float(weight_decay)
        self.n = int(self.pool["input_ids"].shape[0])
        self.max_tokens = int(self.pool["token_lengths"].max())
        self.last_losses: list[float] = []

        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules=list(target_modules),
            bias="none",
        )
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # peft 0.21.2 calls a transformers method deprecated in 4.5x; nothing to act on here
            warnings.filterwarnings(
                "ignore", message=".*is_gradient_checkpointing", category=FutureWarning
            )
            torch.manual_seed(seed)
            self.model = get_peft_model(copy.deepcopy(base_model), config)
        self.model.eval()
        self._trainable = [p for p in self.model.parameters() if p.requires_grad]
        self._init = [p.detach().clone() for p in self._trainable]

    # ------------------------------------------------------------------ helpers
    def reset(self) -> nn.Module:
        """Put the adapters back to their initial values (the shared start point)."""
        with torch.no_grad():
            for p, p0 in zip(self._trainable, self._init, strict=True):
                p.copy_(p0)
        self.model.eval()
        return self.model

    def full_weights(self, weights: torch.Tensor) -> torch.Tensor:
        """``weights [n, T]`` checked and placed on the pool's label positions ``[n, L]``.

        Entries beyond each sequence's token length are padding and ignored.
        """
        _check_tensor(weights, "weights", ndim=2, floating=True)
        if weights.shape[0] != self.n or weights.shape[1] < self.max_tokens:
            raise ValueError(
                f"weights: expected shape [{self.n}, >= {self.max_tokens}] (pool rows, longest "
                f"response), got {tuple(weights.shape)}"
            )
        if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
            raise ValueError("weights: must be finite and non-negative")
        w = weights.detach().to(torch.float32)
        L = self.pool["labels"].shape[1]
        return expand_token_weights(
            w[:, : self.max_tokens], self.pool["response_start"], self.pool["token_lengths"], L
        )

    # ------------------------------------------------------------------ the selector's pair
    def train_fn(self, weights: torch.Tensor, steps: int | None = None) -> nn.Module:
        """Fine-tune the adapters from the start point on the weighted pool; returns the model.

        ``steps`` overrides the constructor's ``steps`` (the selector passes ``QCSConfig.inner_steps``).
        """
        if steps is None:
            steps = self.steps
        else:
            _check_int(steps, "steps", 1)
        full = self.full_weights(weights)
        model = self.reset()
        self.last_losses = []
        rows = torch.nonzero(full.sum(1) > 0).squeeze(1)
        if rows.numel() == 0:
            return model
        ids, labels = self.pool["input_ids"], self.pool["labels"]
        opt = torch.optim.AdamW(self._trainable, lr=self.lr, weight_decay=self.weight_decay)
        dev = self._trainable[0].device  # the pool stays on CPU; each batch moves to the model
        bs = min(self.batch_size, rows.numel())
        model.train()
        with torch.enable_grad():
            for _ in range(steps):
                idx = rows[torch.randperm(rows.numel())[:bs]]
                lab = labels[idx]
                keep = int((lab != -100).any(0).nonzero().max()) + 1  # trim right padding
                logits = model(input_ids=ids[idx, :keep].to(dev)).logits
                loss = weighted_response_loss(
                    logits, lab[:, :keep].to(dev), full[idx, :keep].to(dev)
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                self.last_losses.append(float(loss.detach()))
        model.eval()
        return model

    @torch.no_grad()
    def eval_fn(self, model: nn.Module) -> float:
        """Mean response-token loss (nats per byte) of ``model`` on the target set."""
        return mean_token_loss(model, self.target, self.eval_batch_size)


@torch.no_grad()
def response_token_losses(model: nn.Module, data, batch_size: int = 64) -> torch.Tensor:
    """Per-label-position loss ``[N, L]`` of ``model`` (0 where the label is ignored)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    _check_int(batch_size, "batch_size", 1)
    enc = as_encoding(data)
    ids, labels = enc["input_ids"], enc["labels"]
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = torch.zeros(labels.shape, dtype=torch.float32)
    try:
        for a in range(0, ids.shape[0], batch_size):
            lab = labels[a : a + batch_size]
            real = (lab != -100).any(0).nonzero()
            if real.numel() == 0:
                continue
            keep = int(real.max()) + 1
            logits = model(input_ids=ids[a : a + batch_size, :keep].to(dev)).logits
            loss = per_token_loss(logits, lab[:, :keep].to(dev))
            out[a : a + batch_size, :keep] = loss.float().cpu()
    finally:
        model.train(was_training)
    return out


def mean_token_loss(model: nn.Module, data, batch_size: int = 64) -> float:
    """Mean loss over every response token of ``data`` (token-weighted, not per-sequence)."""
    enc = as_encoding(data)
    loss = response_token_losses(model, enc, batch_size)
    return float(loss.sum() / (enc["labels"] != -100).sum())
