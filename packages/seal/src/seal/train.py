"""Sequence log-probabilities and the DPO loss (spec §2 "DPO", §7 pitfalls).

Built so far: ``sequence_logprob`` and ``dpo_loss``. The ``sft`` / ``dpo`` training loops are not
built yet.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["dpo_loss", "sequence_logprob"]


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
