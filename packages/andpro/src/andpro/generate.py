"""Greedy generation with a press: compressed prefill, then decoding on the kept tokens."""

from __future__ import annotations

import torch

from andpro.press import Press

__all__ = ["generate"]


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    press: Press,
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> torch.Tensor:
    """Greedy decoding: prefill ``input_ids`` under ``press``, then ``max_new_tokens`` steps.

    New tokens take positions ``L + t`` (the cache's logical length), whatever was evicted.

    Args:
        model: a supported transformers causal LM.
        input_ids: ``[B, L]`` int64 prompt (no padding).
        press: the :class:`~andpro.Press` to apply at prefill.
        max_new_tokens: tokens to generate (>= 0).
        eos_token_id: stop once every row has produced it (later tokens of finished rows repeat it).

    Returns:
        ``[B, L + n]`` token ids, ``n <= max_new_tokens``.

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from andpro import AnDProScorer
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> config = LlamaConfig(
        ...     hidden_size=32,
        ...     num_hidden_layers=2,
        ...     num_attention_heads=2,
        ...     num_key_value_heads=1,
        ...     intermediate_size=64,
        ...     vocab_size=64,
        ... )
        >>> model = LlamaForCausalLM(config).eval()
        >>> prompt = torch.randint(0, 64, (1, 100))
        >>> out = generate(model, prompt, Press(AnDProScorer(), budget=48), max_new_tokens=5)
        >>> out.shape
        torch.Size([1, 105])
    """
    if (
        not isinstance(input_ids, torch.Tensor)
        or input_ids.dim() != 2
        or input_ids.dtype != torch.long
    ):
        raise ValueError(
            f"input_ids: expected a [B, L] int64 tensor, got {getattr(input_ids, 'shape', type(input_ids))}"
        )
    if not isinstance(press, Press):
        raise TypeError(f"press: expected an andpro.Press, got {type(press).__name__}")
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens: expected an int >= 0, got {max_new_tokens!r}")
    length = input_ids.shape[1]
    out = input_ids
    with press(model) as cache:
        if max_new_tokens == 0:
            model(input_ids, cache=cache, use_cache=True)
            return out
        logits = model(input_ids, cache=cache, use_cache=True).logits[:, -1]
        finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for t in range(max_new_tokens):
            nxt = logits.argmax(-1)
            if eos_token_id is not None:
                nxt = torch.where(finished, torch.full_like(nxt, eos_token_id), nxt)
                finished |= nxt == eos_token_id
            out = torch.cat([out, nxt[:, None]], dim=1)
            if t == max_new_tokens - 1 or (eos_token_id is not None and bool(finished.all())):
                break
            pos = torch.full(
                (input_ids.shape[0], 1), length + t, dtype=torch.long, device=input_ids.device
            )
            logits = model(nxt[:, None], cache=cache, use_cache=True, position_ids=pos).logits[
                :, -1
            ]
    return out
