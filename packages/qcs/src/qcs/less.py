"""LESS gradient features (Xia et al. 2024, princeton-nlp/LESS ``less/data_selection``; read, not copied).

* :func:`less_warmup`: LoRA warm-up on a random ``fraction`` of the pool (5 % as LESS does) for
  ``epochs`` epochs, AdamW with linear warm-up (3 %) and linear decay (LESS's ``linear`` schedule,
  ``warmup_ratio 0.03``); after each epoch a checkpoint keeps the adapter weights, Adam's
  ``exp_avg``/``exp_avg_sq`` and the epoch's mean learning rate (the checkpoint weight of
  ``matching.py``).
* :func:`less_features`: per-example LoRA gradients (one backward per example, the mean response
  loss, as LESS's batch-size-1 collection), ``kind="adam"`` preconditioned with the checkpoint's
  Adam state as ``collect_grad_reps.obtain_gradients_with_adam`` does
  (``m' = β1·m + (1−β1)·g``, ``v' = β2·v + (1−β2)·g²``, ``m' / sqrt(v' + 1e-8)``) for training
  examples, ``kind="sgd"`` (the plain gradient) for validation examples; then a seeded Rademacher
  projection to ``proj_dim`` (512 here, 8192 in LESS; TRAK's ``BasicProjector`` kind) and L2
  normalisation. Output ``[C, N, proj_dim]``, ready for :func:`~qcs.baselines.less_scores`.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from .ops import _check_int, _check_tensor, weighted_response_loss
from .rollouts import as_encoding

__all__ = ["LessCheckpoint", "LessWarmup", "less_features", "less_warmup"]

_BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8


@dataclass
class LessCheckpoint:
    adapter: list[torch.Tensor]
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    lr: float


@dataclass
class LessWarmup:
    model: nn.Module  # the peft model (adapters at the last checkpoint)
    rows: torch.Tensor  # the warm-up subset of the pool
    checkpoints: list[LessCheckpoint] = field(default_factory=list)

    @property
    def checkpoint_weights(self) -> torch.Tensor:
        return torch.tensor([c.lr for c in self.checkpoints], dtype=torch.float32)


def _trainable(model: nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def less_warmup(
    base_model: nn.Module,
    pool,
    *,
    fraction: float = 0.05,
    epochs: int = 4,
    batch_size: int = 16,
    lr: float = 2e-5,
    warmup_ratio: float = 0.03,
    r: int = 8,
    lora_alpha: int = 16,
    target_modules: tuple[str, ...] = ("q_proj", "v_proj"),
    seed: int = 0,
) -> LessWarmup:
    """LoRA warm-up on a random ``fraction`` of ``pool`` with per-epoch checkpoints (see module)."""
    if not isinstance(base_model, nn.Module):
        raise TypeError(f"base_model: expected an nn.Module, got {type(base_model).__name__}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"fraction: expected a float, got {type(fraction).__name__}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must lie in (0, 1], got {fraction}")
    _check_int(epochs, "epochs", 1)
    _check_int(batch_size, "batch_size", 1)
    if not lr > 0:
        raise ValueError(f"lr: must be > 0, got {lr}")
    if not 0.0 <= warmup_ratio < 1.0:
        raise ValueError(f"warmup_ratio: must lie in [0, 1), got {warmup_ratio}")
    from peft import LoraConfig, get_peft_model

    enc = as_encoding(pool, "pool")
    n = enc["input_ids"].shape[0]
    gen = torch.Generator().manual_seed(seed)
    rows = torch.sort(torch.randperm(n, generator=gen)[: max(1, round(fraction * n))]).values
    config = LoraConfig(
        r=r, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules=list(target_modules)
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*is_gradient_checkpointing", category=FutureWarning
        )
        torch.manual_seed(seed)
        model = get_peft_model(copy.deepcopy(base_model), config)
    params = _trainable(model)
    opt = torch.optim.AdamW(params, lr=lr, betas=(_BETA1, _BETA2), eps=_EPS, weight_decay=0.0)
    per_epoch = math.ceil(rows.numel() / batch_size)
    total = per_epoch * epochs
    warm = math.ceil(warmup_ratio * total)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    ids, labels = enc["input_ids"], enc["labels"]
    out = LessWarmup(model=model, rows=rows)
    dev = params[0].device  # the pool stays on CPU; each batch moves to the model
    model.train()
    with torch.enable_grad():
        for _ in range(epochs):
            order = rows[torch.randperm(rows.numel(), generator=gen)]
            lrs = []
            for a in range(0, order.numel(), batch_size):
                idx = order[a : a + batch_size]
                lab = labels[idx]
                keep = int((lab != -100).any(0).nonzero().max()) + 1
                logits = model(input_ids=ids[idx, :keep].to(dev)).logits
                lab = lab[:, :keep].to(dev)
                loss = weighted_response_loss(
                    logits, lab, torch.ones_like(lab, dtype=torch.float32)
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                lrs.append(opt.param_groups[0]["lr"])
                opt.step()
                sched.step()
            state = [opt.state[p] for p in params]
            out.checkpoints.append(
                LessCheckpoint(
                    adapter=[p.detach().clone() for p in params],
                    exp_avg=torch.cat([s["exp_avg"].reshape(-1) for s in state]).clone(),
                    exp_avg_sq=torch.cat([s["exp_avg_sq"].reshape(-1) for s in state]).clone(),
                    lr=sum(lrs) / len(lrs),
                )
            )
    model.eval()
    return out


def less_features(
    warmup: LessWarmup, data, kind: str = "adam", proj_dim: int = 512, seed: int = 0
) -> torch.Tensor:
    """Projected, L2-normalised per-example LoRA gradients ``[C, N, proj_dim]`` (see module)."""
    if not isinstance(warmup, LessWarmup):
        raise TypeError(f"warmup: expected a LessWarmup, got {type(warmup).__name__}")
    if kind not in ("adam", "sgd"):
        raise ValueError(
            f"kind: expected 'adam' (training examples) or 'sgd' (validation), got {kind!r}"
        )
    _check_int(proj_dim, "proj_dim", 1)
    enc = as_encoding(data)
    model = warmup.model
    params = _trainable(model)
    D = sum(p.numel() for p in params)
    gen = torch.Generator().manual_seed(seed)
    dev = params[0].device
    proj = torch.randint(0, 2, (D, proj_dim), generator=gen).float().mul_(2).sub_(1).to(dev)
    ids, labels = enc["input_ids"], enc["labels"]
    N = ids.shape[0]
    feats = torch.empty(len(warmup.checkpoints), N, proj_dim)
    model.eval()
    with torch.enable_grad():
        for c, ck in enumerate(warmup.checkpoints):
            with torch.no_grad():
                for p, p0 in zip(params, ck.adapter, strict=True):
                    p.copy_(p0)
            for i in range(N):
                lab = labels[i : i + 1]
                keep = int((lab != -100).nonzero()[:, 1].max()) + 1
                logits = model(input_ids=ids[i : i + 1, :keep].to(dev)).logits
                loss = weighted_response_loss(
                    logits, lab[:, :keep].to(dev), torch.ones(1, keep, device=dev)
                )
                grads = torch.autograd.grad(loss, params)
                g = torch.cat([x.reshape(-1) for x in grads])
                if kind == "adam":
                    m = _BETA1 * ck.exp_avg + (1 - _BETA1) * g
                    v = _BETA2 * ck.exp_avg_sq + (1 - _BETA2) * g * g
                    g = m / torch.sqrt(v + _EPS)
                feats[c, i] = (g @ proj).cpu()
    _check_tensor(feats, "features")
    return torch.nn.functional.normalize(feats, dim=-1)
