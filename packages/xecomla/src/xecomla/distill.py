"""Zebra-Llama's training stages: ILD (teacher-forced layer distillation) and logit distillation.

* :func:`ild` — every student layer gets the **teacher's** input hidden state of that layer; the
  loss is Σ_ℓ [mean_tokens ‖h^S_ℓ − h^T_ℓ‖₂ + mean_tokens ‖a^S_ℓ − a^T_ℓ‖₂] over block outputs h and
  mixer outputs a (before the residual add). L2 norms, not squares.
* :func:`distill` — KL(teacher ‖ student) on the logits; ``kl_reduction="token_mean"`` (ours) or
  ``"batchmean"`` (the official ``F.kl_div(..., reduction="batchmean")`` on [B, T, V] logits: the
  token sum divided by B, so the loss — and the effective LR — grows with T).
* :func:`layer_sensitivity` — SMART's s_ℓ = KL(T‖all-Mamba2) − KL(T‖all-Mamba2 with layer ℓ MLA).

Under ``torch.distributed`` (an initialised process group with world size > 1) every step averages
the gradients over ranks (what DDP's all-reduce does; the layers stay reachable for ILD's
teacher forcing), and :func:`layer_sensitivity` all-reduces its KL sums and token counts. With
equal per-rank batches this equals one process on the union batch.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["distill", "ild", "kl_divergence", "layer_sensitivity"]

KL_REDUCTIONS = ("token_mean", "batchmean")


def kl_divergence(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, kl_reduction: str = "token_mean"
):
    """KL(teacher ‖ student) of [B, T, V] logits: the token mean, or the token sum / B (``"batchmean"``).

    Example:
        >>> import torch
        >>> s, t = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
        >>> a, b = kl_divergence(s, t, "batchmean"), kl_divergence(s, t, "token_mean")
        >>> bool(torch.isclose(a, 3 * b))  # T = 3 tokens per row
        True
    """
    if kl_reduction not in KL_REDUCTIONS:
        raise ValueError(f"kl_reduction: expected one of {KL_REDUCTIONS}, got {kl_reduction!r}")
    if student_logits.shape != teacher_logits.shape or student_logits.dim() != 3:
        raise ValueError(
            f"student_logits, teacher_logits: expected equal [B, T, V] shapes, got {list(student_logits.shape)} and "
            f"{list(teacher_logits.shape)}"
        )
    low = (torch.float16, torch.bfloat16)
    log_s = F.log_softmax(
        student_logits.float() if student_logits.dtype in low else student_logits, dim=-1
    )
    log_t = F.log_softmax(
        teacher_logits.float() if teacher_logits.dtype in low else teacher_logits, dim=-1
    )
    per_token = (log_t.exp() * (log_t - log_s)).sum(-1)  # [B, T]
    return (
        per_token.mean() if kl_reduction == "token_mean" else per_token.sum() / per_token.shape[0]
    )


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _average_gradients(params) -> None:
    world = _world()
    if world == 1:
        return
    for p in params:
        if (
            p.grad is not None
        ):  # unused parameters (e.g. the head under ILD) have none on every rank
            dist.all_reduce(p.grad)
            p.grad /= world


def _check_common(steps, lr, batches):
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive int, got {steps!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr: expected a float > 0, got {lr!r}")
    batches = list(batches)
    if not batches or not all(isinstance(b, torch.Tensor) and b.dim() == 2 for b in batches):
        raise ValueError("batches: expected a non-empty sequence of [B, T] token-id tensors")
    return batches


def _optimizer(params, lr, steps, warmup_fraction=0.01):
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, round(warmup_fraction * steps))

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _causal_mask(T, dtype, device):
    allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return torch.zeros(T, T, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))[
        None, None
    ]


@torch.no_grad()
def _teacher_layer_io(teacher, input_ids):
    """Per teacher layer: (block input, block output, mixer output)."""
    records, hooks = [], []
    for layer in teacher.model.layers:
        rec = {}
        records.append(rec)
        hooks.append(
            layer.register_forward_pre_hook(
                lambda m, a, k, rec=rec: rec.__setitem__("in", a[0] if a else k["hidden_states"]),
                with_kwargs=True,
            )
        )
        hooks.append(
            layer.register_forward_hook(
                lambda m, a, o, rec=rec: rec.__setitem__("out", o[0] if isinstance(o, tuple) else o)
            )
        )
        hooks.append(
            layer.self_attn.register_forward_hook(
                lambda m, a, o, rec=rec: rec.__setitem__("mix", o[0])
            )
        )
    try:
        teacher(input_ids=input_ids)
    finally:
        for h in hooks:
            h.remove()
    return records


def ild(student, teacher, batches, *, steps: int, lr: float = 2e-4) -> list[float]:
    """Teacher-forced layer distillation of every student layer; returns the loss per step.

    Args:
        student: a hybrid ``LlamaForCausalLM`` (from :func:`xecomla.compose`); all its parameters train.
        teacher: the ``LlamaForCausalLM`` it was composed from (frozen, eval).
        batches: [B, T] token ids, cycled for ``steps`` steps.
        steps: optimiser steps (AdamW, 1 % warm-up, cosine).
        lr: peak learning rate (official 2e-4).
    """
    batches = _check_common(steps, lr, batches)
    if len(student.model.layers) != len(teacher.model.layers):
        raise ValueError(
            f"student: {len(student.model.layers)} layers, but the teacher has {len(teacher.model.layers)}"
        )
    teacher.eval()
    params = [p for p in student.parameters() if p.requires_grad]
    opt, sched = _optimizer(params, lr, steps)
    losses = []
    with torch.enable_grad():
        student.train()
        for step in range(steps):
            ids = batches[step % len(batches)]
            records = _teacher_layer_io(teacher, ids)
            B, T = ids.shape
            pos = torch.arange(T, device=ids.device).expand(B, T)
            x0 = records[0]["in"]
            cos_sin = student.model.rotary_emb(x0, pos)
            mask = _causal_mask(T, x0.dtype, x0.device)
            loss = x0.new_zeros(())
            for layer, rec in zip(student.model.layers, records, strict=True):
                captured = {}
                hook = layer.self_attn.register_forward_hook(
                    lambda m, a, o, c=captured: c.__setitem__("mix", o[0])
                )
                try:
                    out = layer(
                        rec["in"],
                        attention_mask=mask,
                        position_ids=pos,
                        position_embeddings=cos_sin,
                    )
                finally:
                    hook.remove()
                out = out[0] if isinstance(out, tuple) else out
                loss = (
                    loss
                    + (out - rec["out"]).norm(dim=-1).mean()
                    + (captured["mix"] - rec["mix"]).norm(dim=-1).mean()
                )
            opt.zero_grad(set_to_none=False)
            loss.backward()
            _average_gradients(params)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
    student.eval()
    return losses


def distill(
    student, teacher, batches, *, steps: int, lr: float = 8e-5, kl_reduction: str = "token_mean"
) -> list[float]:
    """End-to-end logit distillation, KL(teacher ‖ student); returns the loss per step.

    Args:
        student, teacher: ``LlamaForCausalLM``s with the same vocabulary.
        batches: [B, T] token ids, cycled for ``steps`` steps.
        steps: AdamW steps (1 % warm-up, cosine); lr: peak LR (official 8e-5 for 1B, 4e-5 for 3B/8B,
            with ``"batchmean"``, whose loss is T times the token mean).
        kl_reduction: ``"token_mean"`` (default) or ``"batchmean"`` (token sum / B, the official).
    """
    if kl_reduction not in KL_REDUCTIONS:
        raise ValueError(f"kl_reduction: expected one of {KL_REDUCTIONS}, got {kl_reduction!r}")
    batches = _check_common(steps, lr, batches)
    teacher.eval()
    params = [p for p in student.parameters() if p.requires_grad]
    opt, sched = _optimizer(params, lr, steps)
    losses = []
    with torch.enable_grad():
        student.train()
        for step in range(steps):
            ids = batches[step % len(batches)]
            with torch.no_grad():
                t_logits = teacher(input_ids=ids).logits
            loss = kl_divergence(student(input_ids=ids).logits, t_logits, kl_reduction)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            _average_gradients(params)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
    student.eval()
    return losses


@torch.no_grad()
def _kl_sum(model, teacher, batches):
    total = torch.zeros(2, dtype=torch.float64)
    for ids in batches:
        t = teacher(input_ids=ids).logits
        s = model(input_ids=ids).logits
        total += torch.tensor(
            [float(kl_divergence(s, t, "token_mean")) * ids.numel(), ids.numel()],
            dtype=torch.float64,
        )
    if _world() > 1:
        dist.all_reduce(total)
    return float(total[0] / total[1])


def layer_sensitivity(mla_model, mamba_model, teacher, batches) -> list[float]:
    """SMART's s_ℓ = KL(T ‖ all-Mamba2) − KL(T ‖ all-Mamba2 with layer ℓ taken from the all-MLA model).

    Args:
        mla_model: the ILD-trained all-MLA student; mamba_model: the ILD-trained all-Mamba2 student.
        teacher: the teacher; batches: calibration [B, T] token ids (the KL is a token mean over all
            of them, summed over ranks under torch.distributed).
    """
    batches = _check_common(1, 1.0, batches)
    L = len(mamba_model.model.layers)
    if len(mla_model.model.layers) != L:
        raise ValueError(f"mla_model: {len(mla_model.model.layers)} layers, mamba_model has {L}")
    base = _kl_sum(mamba_model, teacher, batches)
    out = []
    for i in range(L):
        original = mamba_model.model.layers[i].self_attn
        mamba_model.model.layers[i].self_attn = mla_model.model.layers[i].self_attn
        try:
            out.append(base - _kl_sum(mamba_model, teacher, batches))
        finally:
            mamba_model.model.layers[i].self_attn = original
    return out
