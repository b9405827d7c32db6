"""Test metrics of the reduced reproduction: greedy decoding and exact match.

:func:`greedy_responses` decodes each prompt ``"Q: {instruction}\\nA: "`` greedily with
``transformers``' ``generate`` (left padding with an attention mask, KV cache, stop at the newline
byte), the way a user scores a causal LM; :func:`exact_match` compares the decoded bytes with the
reference response. A test checks the batched, padded decode against an unpadded one-example
argmax loop.

Example (CPU, a second):

    >>> from neurips25_core.models import tiny_llama, tiny_llama_config
    >>> from qcs.tasks import make_target_set
    >>> model = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2))
    >>> hits = exact_match(model, make_target_set(4), max_new_bytes=4)
    >>> hits.shape
    torch.Size([4])
"""

from __future__ import annotations

import torch
from torch import nn

from .ops import _check_int
from .tasks import InstructionPair

__all__ = ["exact_match", "greedy_responses", "prompt_bytes"]

_NEWLINE = 10


def prompt_bytes(pair: InstructionPair) -> list[int]:
    """The prompt bytes of a pair, as :func:`~qcs.tasks.encode_pairs` lays them out."""
    return list(f"Q: {pair.instruction}\nA: ".encode())


def _check(model, pairs, max_new_bytes, batch_size) -> list[InstructionPair]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise TypeError("pairs: expected a non-empty list of InstructionPair")
    if not all(isinstance(p, InstructionPair) for p in pairs):
        raise TypeError("pairs: expected InstructionPair items")
    _check_int(max_new_bytes, "max_new_bytes", 1)
    _check_int(batch_size, "batch_size", 1)
    return list(pairs)


@torch.no_grad()
def greedy_responses(
    model: nn.Module, pairs, max_new_bytes: int = 16, batch_size: int = 128
) -> list[bytes]:
    """Greedy continuation of each pair's prompt up to the first newline (excluded).

    Args:
        model: a byte-level causal LM with ``generate`` (a ``transformers`` model or a peft
            wrapper of one); its train/eval mode is restored afterwards.
        pairs: :class:`~qcs.tasks.InstructionPair` list (their responses are not read).
        max_new_bytes: decoding stops after this many bytes when no newline came.
        batch_size: prompts per ``generate`` call.

    Returns:
        One ``bytes`` per pair (without the newline).
    """
    pairs = _check(model, pairs, max_new_bytes, batch_size)
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out: list[bytes] = []
    try:
        for a in range(0, len(pairs), batch_size):
            prompts = [prompt_bytes(p) for p in pairs[a : a + batch_size]]
            L = max(len(p) for p in prompts)
            ids = torch.zeros(len(prompts), L, dtype=torch.long)
            mask = torch.zeros(len(prompts), L, dtype=torch.long)
            for i, p in enumerate(prompts):  # left padding: the last prompt byte is aligned
                ids[i, L - len(p) :] = torch.tensor(p)
                mask[i, L - len(p) :] = 1
            gen = model.generate(
                input_ids=ids.to(dev),
                attention_mask=mask.to(dev),
                max_new_tokens=max_new_bytes,
                do_sample=False,
                num_beams=1,
                eos_token_id=_NEWLINE,
                pad_token_id=_NEWLINE,
            )
            for row in gen[:, L:].cpu().tolist():
                cut = row.index(_NEWLINE) if _NEWLINE in row else len(row)
                out.append(bytes(row[:cut]))
    finally:
        model.train(was_training)
    return out


def exact_match(
    model: nn.Module, pairs, max_new_bytes: int = 16, batch_size: int = 128
) -> torch.Tensor:
    """``[N]`` bool: the greedy response equals the pair's response exactly."""
    pairs = _check(model, pairs, max_new_bytes, batch_size)
    got = greedy_responses(model, pairs, max_new_bytes, batch_size)
    return torch.tensor([g == p.response.encode() for g, p in zip(got, pairs, strict=True)])
