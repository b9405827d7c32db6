"""Sequence log-probabilities, the DPO loss and the SFT / DPO training loops (spec §2, §7 pitfalls).

Both loops run through ``neurips25_core.models.train`` (AdamW, warm-up + cosine, clipping, always under
``enable_grad``) and are DDP-ready: inside an initialised process group with more than one rank the
model is wrapped in ``DistributedDataParallel`` (unless it already is), every rank draws the same
global batch of ``batch_size`` examples and trains on its contiguous share, and the losses are
normalised so that DDP's gradient average equals one process on the global batch (the SFT loss
divides by the *global* number of target tokens, all-reduced).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["dpo", "dpo_loss", "encode_pairs", "encode_sft", "sequence_logprob", "sft"]


def _tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    return value


def sequence_logprob(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    attention: torch.Tensor,
) -> torch.Tensor:
    """Summed log-probability of each completion given its prompt, ``[B]``.

    ``prompt_ids`` ``[B, P]`` (left- or right-padded), ``completion_ids`` ``[B, C]``, ``attention``
    ``[B, P + C]`` the 0/1 mask over ``cat(prompt_ids, completion_ids)``. Only completion tokens with
    attention 1 are scored; prompt and padding are masked. Position ids follow the unpadded order, so
    where the padding sits does not change the result. ``model(input_ids, attention_mask,
    position_ids)`` must return an object with ``.logits`` (a transformers causal LM).
    """
    prompt_ids = _tensor("prompt_ids", prompt_ids)
    completion_ids = _tensor("completion_ids", completion_ids)
    attention = _tensor("attention", attention)
    if prompt_ids.dim() != 2 or completion_ids.dim() != 2:
        raise ValueError(
            f"prompt_ids/completion_ids: expected [B, P] and [B, C], got {tuple(prompt_ids.shape)} "
            f"and {tuple(completion_ids.shape)}"
        )
    b, p = prompt_ids.shape
    if completion_ids.shape[0] != b:
        raise ValueError(
            f"completion_ids: batch size {completion_ids.shape[0]} != prompt_ids batch size {b}"
        )
    if completion_ids.shape[1] == 0:
        raise ValueError("completion_ids: empty completion")
    if attention.shape != (b, p + completion_ids.shape[1]):
        raise ValueError(
            f"attention: expected shape {(b, p + completion_ids.shape[1])}, got {tuple(attention.shape)}"
        )
    if p == 0:
        raise ValueError("prompt_ids: empty prompt")
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = attention.to(torch.long)
    is_completion = torch.zeros_like(mask, dtype=torch.bool)
    is_completion[:, p:] = True
    # compact every row (attended tokens first, order kept): any padding layout becomes right padding,
    # so the logits that predict a token always sit at the previous *attended* token
    order = torch.sort(-mask, dim=1, stable=True).indices
    ids, mask, is_completion = (
        ids.gather(1, order),
        mask.gather(1, order),
        is_completion.gather(1, order),
    )
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, :-1]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    token_logp = (
        F.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    )  # predicts token t+1
    scored = mask[:, 1:].bool() & is_completion[:, 1:]
    return torch.where(scored, token_logp, torch.zeros_like(token_logp)).sum(-1)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    beta: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sigmoid DPO loss on summed log-probs: ``(mean loss, chosen_reward [B], rejected_reward [B])``.

    ``loss = -log sigma(beta * ((pc - rc) - (pr - rr)))``; rewards ``beta * (pc - rc)`` and
    ``beta * (pr - rr)``, detached.
    """
    names = ("policy_chosen", "policy_rejected", "reference_chosen", "reference_rejected")
    tensors = [
        _tensor(n, t)
        for n, t in zip(
            names,
            (policy_chosen, policy_rejected, reference_chosen, reference_rejected),
            strict=True,
        )
    ]
    if isinstance(beta, bool) or not isinstance(beta, int | float):
        raise TypeError(f"beta: expected a float, got {type(beta).__name__}")
    if not beta > 0:
        raise ValueError(f"beta: must be > 0, got {beta}")
    shape = tensors[0].shape
    if len(shape) != 1:
        raise ValueError(f"policy_chosen: expected a 1-d [B] tensor, got shape {tuple(shape)}")
    for n, t in zip(names[1:], tensors[1:], strict=True):
        if t.shape != shape:
            raise ValueError(
                f"{n}: batch shape {tuple(t.shape)} differs from policy_chosen {tuple(shape)}"
            )
    pc, pr, rc, rr = tensors
    chosen = beta * (pc - rc)
    rejected = beta * (pr - rr)
    loss = -F.logsigmoid(chosen - rejected).mean()
    return loss, chosen.detach(), rejected.detach()


# ---------------------------------------------------------------------------------------------
# training loops


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _maybe_ddp(model: nn.Module) -> nn.Module:
    _, world = _world()
    if world > 1 and not isinstance(model, nn.parallel.DistributedDataParallel):
        return nn.parallel.DistributedDataParallel(model)
    return model


def _pairs(name: str, items: object, fields: tuple[str, ...]) -> list[tuple[str, ...]]:
    """``items`` as tuples of strings: objects with ``fields`` attributes or plain tuples."""
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise TypeError(f"{name}: expected a sequence, got {type(items).__name__}")
    if not items:
        raise ValueError(f"{name}: empty")
    out = []
    for k, item in enumerate(items):
        if all(hasattr(item, f) for f in fields):
            row = tuple(getattr(item, f) for f in fields)
        elif isinstance(item, tuple | list) and len(item) == len(fields):
            row = tuple(item)
        else:
            raise TypeError(
                f"{name}: item {k} is neither an object with {fields} nor a {len(fields)}-tuple"
            )
        for f, v in zip(fields, row, strict=True):
            if not isinstance(v, str):
                raise TypeError(f"{name}: item {k} field {f} is {type(v).__name__}, expected str")
            if not v.strip():
                raise ValueError(f"{name}: item {k} has an empty {f}")
        out.append(row)
    return out


def _check_length(name: str, k: int, n: int, max_length: int | None) -> None:
    if max_length is not None and n > max_length:
        raise ValueError(
            f"{name}: item {k} is {n} tokens long, more than max_length={max_length} "
            "(raise the model's max_positions or shorten the texts)"
        )


def encode_sft(
    tokenizer, examples: Sequence, max_length: int | None = None
) -> list[tuple[list[int], int]]:
    """``(ids, prompt_length)`` per example: ``<bos> prompt completion <eos>``; the loss is on the
    completion and ``<eos>``. ``examples``: ``SFTExample``\\ s or ``(prompt, completion)`` tuples."""
    rows = _pairs("examples", examples, ("prompt", "completion"))
    out = []
    for k, (prompt, completion) in enumerate(rows):
        p = tokenizer.encode(prompt, add_bos=True)
        ids = p + tokenizer.encode(completion, add_eos=True)
        _check_length("examples", k, len(ids), max_length)
        out.append((ids, len(p)))
    return out


def encode_pairs(
    tokenizer, pairs: Sequence, max_length: int | None = None
) -> list[tuple[list[int], list[int], list[int]]]:
    """``(prompt_ids, chosen_ids, rejected_ids)`` per pair (``<bos>`` before the prompt, ``<eos>``
    after each completion). ``pairs``: ``PreferencePair``\\ s or ``(prompt, chosen, rejected)``."""
    rows = _pairs("pairs", pairs, ("prompt", "chosen", "rejected"))
    out = []
    for k, (prompt, chosen, rejected) in enumerate(rows):
        p = tokenizer.encode(prompt, add_bos=True)
        c = tokenizer.encode(chosen, add_eos=True)
        r = tokenizer.encode(rejected, add_eos=True)
        _check_length("pairs", k, len(p) + max(len(c), len(r)), max_length)
        out.append((p, c, r))
    return out


def _pad(
    rows: Sequence[Sequence[int]], value: int, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl] = torch.tensor(r, dtype=torch.long)
        mask[i, sl] = 1
    return ids, mask


def _check_int(name: str, v: object, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
    if v < low:
        raise ValueError(f"{name}: must be >= {low}, got {v}")
    return v


def _check_float(name: str, v: object, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"{name}: expected a float, got {type(v).__name__}")
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(
            f"{name}: expected a finite number {'> 0' if positive else '>= 0'}, got {v}"
        )
    return float(v)


def _batches(n: int, batch_size: int, seed: int):
    """``step -> LongTensor`` of this rank's share of the global batch (epoch-wise shuffles)."""
    rank, world = _world()
    if batch_size % world:
        raise ValueError(
            f"batch_size: the global batch {batch_size} is not divisible by the world size {world}"
        )
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []

    def draw(step: int) -> torch.Tensor:
        while len(order) < batch_size:
            order.extend(torch.randperm(n, generator=gen).tolist())
        batch = torch.tensor(order[:batch_size], dtype=torch.long)
        del order[:batch_size]
        return batch.chunk(world)[rank]

    return draw


def _model_max_length(model: nn.Module) -> int | None:
    return getattr(getattr(_unwrap(model), "config", None), "max_position_embeddings", None)


def _check_tokenizer(tokenizer, model: nn.Module) -> None:
    if not callable(getattr(tokenizer, "encode", None)) or not hasattr(tokenizer, "pad_id"):
        raise TypeError(f"tokenizer: expected a WordTokenizer, got {type(tokenizer).__name__}")
    size = getattr(getattr(_unwrap(model), "config", None), "vocab_size", None)
    if size is not None and len(tokenizer) > size:
        raise ValueError(
            f"tokenizer: {len(tokenizer)} tokens do not fit the model's vocab_size={size}"
        )


def sft(
    model: nn.Module,
    tokenizer,
    examples: Sequence,
    max_steps: int,
    batch_size: int = 16,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    warmup: int | None = None,
    grad_clip: float | None = 1.0,
    seed: int = 0,
    progress: bool = False,
):
    """Multi-task SFT (spec §2: next-token cross-entropy on completion tokens only, λ = 1 per task).

    Args:
        model: a causal LM (``LlamaForCausalLM`` from :func:`seal.models.tiny_lm`), or a DDP wrapper
            of one; inside a process group of > 1 ranks it is wrapped in DDP here.
        tokenizer: the :class:`seal.models.WordTokenizer` of the model.
        examples: ``SFTExample``\\ s (``seal.distill.build_sft``) or ``(prompt, completion)`` tuples.
        max_steps: optimizer steps (>= 1).
        batch_size: the *global* batch (examples per step over all ranks).
        lr, weight_decay, warmup, grad_clip: AdamW, warm-up + cosine (``neurips25_core.models.train``).
        seed: the batch order (the same on every rank).

    The loss of a batch is the summed token cross-entropy over its completion tokens divided by the
    global number of completion tokens, so every task weighs by its tokens (λ = 1).

    Returns:
        ``neurips25_core.models.TrainResult`` (per-step loss of this rank's share).
    """
    from neurips25_core.models import train

    _check_tokenizer(tokenizer, model)
    max_steps = _check_int("max_steps", max_steps, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    lr = _check_float("lr", lr, positive=True)
    encoded = encode_sft(tokenizer, examples, _model_max_length(model))
    draw = _batches(len(encoded), batch_size, seed)
    pad = tokenizer.pad_id

    def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [encoded[i] for i in draw(step).tolist()]
        ids, _ = _pad([r for r, _ in rows], pad, left=False)
        labels = torch.full_like(ids, -100)
        for k, (r, p) in enumerate(rows):
            labels[k, p : len(r)] = ids[k, p : len(r)]
        return ids, labels

    def loss_fn(m: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # right padding: the pad id appears nowhere else, so the mask is ids != pad
        logits = m(input_ids=ids, attention_mask=(ids != pad).long()).logits[:, :-1]
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        target = labels[:, 1:]
        nll = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            target.reshape(-1),
            ignore_index=-100,
            reduction="sum",
        )
        count = (target != -100).sum().to(nll.dtype)
        _, world = _world()
        if world > 1:
            import torch.distributed as dist

            count = count.detach().clone()
            dist.all_reduce(count)
        # DDP averages gradients over ranks: scale by the world size so that the average is the
        # global token mean
        return nll * world / count

    wrapped = _maybe_ddp(model)
    return train(
        wrapped,
        data,
        steps=max_steps,
        lr=lr,
        weight_decay=weight_decay,
        warmup=warmup,
        grad_clip=grad_clip,
        loss_fn=loss_fn,
        progress=progress,
        desc="seal sft",
    )


def _storages(model: nn.Module) -> dict[int, str]:
    out = {}
    for name, p in _unwrap(model).named_parameters():
        out[p.untyped_storage().data_ptr()] = name
    return out


def _check_dpo(
    policy: nn.Module, reference: object, tokenizer, max_steps, batch_size, lr, beta
) -> tuple[int, int, float, float]:
    """The checks every DPO loop makes (ours and :func:`seal.peers.trl_dpo`): a reference module
    that shares no parameter with the policy, a tokenizer that fits, and positive numbers."""
    if not isinstance(reference, nn.Module):
        raise TypeError(f"reference: expected an nn.Module or None, got {type(reference).__name__}")
    shared = set(_storages(policy)) & set(_storages(reference))
    if reference is policy or shared:
        names = sorted(_storages(reference)[s] for s in shared)[:3]
        raise ValueError(
            "reference: shares parameters with the policy "
            f"({', '.join(names) or 'the same module'}); pass a frozen deep copy "
            "(copy.deepcopy(policy)) or None"
        )
    _check_tokenizer(tokenizer, policy)
    return (
        _check_int("max_steps", max_steps, 1),
        _check_int("batch_size", batch_size, 1),
        _check_float("lr", lr, positive=True),
        _check_float("beta", beta, positive=True),
    )


def dpo(
    policy: nn.Module,
    reference: nn.Module | None,
    tokenizer,
    pairs: Sequence,
    max_steps: int,
    beta: float = 0.1,
    batch_size: int = 16,
    lr: float = 1e-4,
    weight_decay: float = 0.0,
    warmup: int | None = None,
    grad_clip: float | None = 1.0,
    seed: int = 0,
    progress: bool = False,
):
    """DPO on preference pairs (spec §2 "DPO": sigmoid loss on summed completion log-probs).

    Args:
        policy: the SFT model to train (or a DDP wrapper; wrapped here inside a process group).
        reference: the frozen reference π_ref; ``None`` takes a deep copy of ``policy`` now. It must
            not share a parameter with the policy (``ValueError``), and is used in eval mode under
            ``no_grad``; its log-probs are computed once per pair and cached.
        tokenizer: the models' :class:`seal.models.WordTokenizer`.
        pairs: ``PreferencePair``\\ s (``seal.distill.build_preferences``) or
            ``(prompt, chosen, rejected)`` tuples.
        max_steps: optimizer steps (>= 1).
        beta: the DPO temperature (> 0).
        batch_size: the *global* batch of pairs per step.

    Returns:
        ``neurips25_core.models.TrainResult``; ``tokens`` counts pairs, not tokens.
    """
    from neurips25_core.models import train

    if not isinstance(policy, nn.Module):
        raise TypeError(f"policy: expected an nn.Module, got {type(policy).__name__}")
    if reference is None:
        reference = copy.deepcopy(_unwrap(policy))
    max_steps, batch_size, lr, beta = _check_dpo(
        policy, reference, tokenizer, max_steps, batch_size, lr, beta
    )
    encoded = encode_pairs(tokenizer, pairs, _model_max_length(policy))
    draw = _batches(len(encoded), batch_size, seed)
    pad = tokenizer.pad_id
    reference.eval()
    ref_cache: dict[int, tuple[float, float]] = {}

    def batch(rows: list[tuple[list[int], list[int], list[int]]]):
        # chosen and rejected in one forward (DDP wants one forward per backward)
        prompts, _ = _pad([p for p, _, _ in rows] * 2, pad, left=True)
        p_mask = (prompts != pad).long()
        comps, c_mask = _pad([c for _, c, _ in rows] + [r for _, _, r in rows], pad, left=False)
        return prompts, comps, torch.cat([p_mask, c_mask], 1)

    def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = draw(step)
        return idx, idx

    def loss_fn(m: nn.Module, idx: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
        keys = idx.tolist()
        rows = [encoded[i] for i in keys]
        prompts, comps, attention = batch(rows)
        device = next(m.parameters()).device
        prompts, comps, attention = prompts.to(device), comps.to(device), attention.to(device)
        missing = [k for k in dict.fromkeys(keys) if k not in ref_cache]
        if missing:
            with torch.no_grad():
                mp, mc, ma = batch([encoded[i] for i in missing])
                logp = sequence_logprob(reference, mp.to(device), mc.to(device), ma.to(device))
            half = len(missing)
            for j, k in enumerate(missing):
                ref_cache[k] = (logp[j].item(), logp[half + j].item())
        b = len(keys)
        logp = sequence_logprob(m, prompts, comps, attention)
        ref = torch.tensor([ref_cache[k] for k in keys], dtype=logp.dtype, device=device)
        loss, _, _ = dpo_loss(logp[:b], logp[b:], ref[:, 0], ref[:, 1], beta=beta)
        return loss

    wrapped = _maybe_ddp(policy)
    return train(
        wrapped,
        data,
        steps=max_steps,
        lr=lr,
        weight_decay=weight_decay,
        warmup=warmup,
        grad_clip=grad_clip,
        loss_fn=loss_fn,
        progress=progress,
        desc="seal dpo",
    )
