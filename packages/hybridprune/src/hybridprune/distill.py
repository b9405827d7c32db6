"""Logit distillation (Minitron): forward KL(p_teacher ‖ p_student) on non-pad tokens, no CE."""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from hybridprune.importance import _batches, _check_batch

__all__ = ["distill", "kd_loss"]


def _kl_sum(student_logits, teacher_logits, temperature, mask):
    dt = torch.promote_types(
        torch.promote_types(student_logits.dtype, teacher_logits.dtype), torch.float32
    )
    log_s = F.log_softmax(student_logits.to(dt) / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.to(dt) / temperature, dim=-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1)  # [B, T]
    if mask is not None:
        kl = kl * mask.to(kl.dtype)
    return kl.sum()


def _check_logits(student_logits, teacher_logits, temperature, mask):
    for name, t in (("student_logits", student_logits), ("teacher_logits", teacher_logits)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating-point tensor, got {type(t).__name__}")
    if student_logits.shape != teacher_logits.shape or student_logits.ndim < 2:
        raise ValueError(
            f"teacher_logits: shape {tuple(teacher_logits.shape)} must equal student_logits' "
            f"{tuple(student_logits.shape)} ([..., vocab])"
        )
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not temperature > 0
    ):
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    if mask is not None and (
        not isinstance(mask, torch.Tensor) or mask.shape != student_logits.shape[:-1]
    ):
        raise ValueError(f"mask: expected a tensor of shape {tuple(student_logits.shape[:-1])}")


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    mask=None,
) -> torch.Tensor:
    """Forward KL(softmax(t/τ) ‖ softmax(s/τ)) per token, averaged over the tokens where ``mask`` is 1.

    Computed in float32 (or float64 for float64 logits). Not scaled by τ² (at the default τ = 1,
    the only value the paper uses, the two conventions agree). Gradients flow to the student only
    if the teacher logits are detached (``distill`` computes them under ``no_grad``).

    Example:
        >>> s = torch.tensor([[[0.0, 1.0]]])
        >>> round(float(kd_loss(s, s)), 6), float(kd_loss(s, torch.tensor([[[1.0, 0.0]]]))) > 0
        (0.0, True)
    """
    _check_logits(student_logits, teacher_logits, temperature, mask)
    n = student_logits[..., 0].numel() if mask is None else mask.sum()
    return _kl_sum(student_logits, teacher_logits, temperature, mask) / torch.as_tensor(
        n
    ).clamp_min(1)


def _lr_at(step, steps, lr, final_lr, warmup, schedule):
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup - 1)
    frac = min(1.0, frac)
    if schedule == "linear":
        return lr + (final_lr - lr) * frac
    if schedule == "cosine":
        return final_lr + 0.5 * (lr - final_lr) * (1 + math.cos(math.pi * frac))
    return lr  # constant


def distill(
    student: nn.Module,
    teacher: nn.Module,
    batches,
    *,
    steps: int,
    lr: float,
    warmup: int = 100,
    schedule: str = "linear",
    final_lr: float | None = None,
    temperature: float = 1.0,
    weight_decay: float = 0.0,
    clip: float | None = 1.0,
    progress: bool = False,
    callback=None,
) -> list[float]:
    """Distil ``teacher`` into ``student`` with ``kd_loss`` and AdamW for ``steps`` steps; returns the losses.

    ``batches`` (token-id tensors or mappings with ``input_ids``/``attention_mask``) is cycled. The LR
    warms up linearly over ``warmup`` steps, then decays to ``final_lr`` (default ``lr / 10``:
    Minitron's 1e-4 → 1e-5, or the issue's 1e-3 → 1e-4) by ``schedule`` (``"linear"``, ``"cosine"``,
    ``"constant"``). Runs under ``enable_grad`` even inside ``no_grad``.

    Under torch.distributed (process group initialised, world size > 1) each rank passes its own
    batches; the loss is the KL summed over every rank's tokens divided by the global token count,
    and gradients are all-reduced (summed), so two ranks take the step one process takes on the
    union of their batches.

    ``callback(step, student)``, when given, runs after every optimizer step (``step`` counts from
    1), for example to evaluate the student on held-out data; the student is put back in training
    mode afterwards.
    """
    for name, m in (("student", student), ("teacher", teacher)):
        if not isinstance(m, nn.Module):
            raise TypeError(f"{name}: expected a torch.nn.Module, got {type(m).__name__}")
    if student is teacher:
        raise ValueError("student: must not be the teacher itself (prune returns a new model)")
    for name, v in (("steps", steps), ("warmup", warmup)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "steps" else 0):
            raise ValueError(f"{name}: expected an int >= {1 if name == 'steps' else 0}, got {v!r}")
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr: expected a number > 0, got {lr!r}")
    final_lr = lr / 10 if final_lr is None else final_lr
    if not isinstance(final_lr, (int, float)) or final_lr < 0:
        raise ValueError(f"final_lr: expected a number >= 0, got {final_lr!r}")
    if schedule not in ("linear", "cosine", "constant"):
        raise ValueError(f"schedule: expected 'linear', 'cosine' or 'constant', got {schedule!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not temperature > 0
    ):
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    if callback is not None and not callable(callback):
        raise TypeError(
            f"callback: expected a callable (step, student), got {type(callback).__name__}"
        )
    data = list(_batches(batches, None))
    if not data:
        raise ValueError("batches: no batch was given")
    data = [(ids, _check_batch(i, ids, mask)) for i, (ids, mask) in enumerate(data)]
    distributed = (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )
    device = next(student.parameters()).device
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    teacher_training = teacher.training
    teacher.eval()
    student.train()
    losses: list[float] = []
    from neurips25_core.progress import progress_bar

    try:
        with torch.enable_grad():
            bar = progress_bar(total=steps, desc="distill", enabled=progress)
            for step, (ids, mask) in zip(range(steps), itertools.cycle(data)):
                for group in opt.param_groups:
                    group["lr"] = _lr_at(step, steps, lr, final_lr, warmup, schedule)
                ids, mask = ids.to(device), mask.to(device)
                with torch.no_grad():
                    t_logits = teacher(
                        input_ids=ids, attention_mask=mask.long(), use_cache=False
                    ).logits
                s_logits = student(
                    input_ids=ids, attention_mask=mask.long(), use_cache=False
                ).logits
                n = mask.sum().to(torch.float64)
                if distributed:
                    torch.distributed.all_reduce(n)
                loss = _kl_sum(s_logits, t_logits.detach(), temperature, mask) / n.clamp_min(1)
                opt.zero_grad(set_to_none=False)
                loss.backward()
                reported = loss.detach().double()
                if distributed:
                    for p in params:
                        torch.distributed.all_reduce(p.grad)
                    torch.distributed.all_reduce(reported)
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(params, clip)
                opt.step()
                losses.append(float(reported))
                bar.update(1)
                if callback is not None:
                    callback(step + 1, student)
                    student.train()
            bar.close()
    finally:
        teacher.train(teacher_training)
    return losses
