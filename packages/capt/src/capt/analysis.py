"""Attention to and from the prompt slots, per layer (Findings I and III, the "attention anchor").

Needs the attention probabilities, so the base model must run eager attention
(``attn_implementation="eager"``); SDPA and flash kernels return none (spec, pitfalls).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

__all__ = ["prompt_attention"]


def _base(model: nn.Module) -> nn.Module:
    # CapsuleModel.base_model is the transformers model; a peft model's get_base_model() is too.
    if hasattr(model, "get_base_model"):
        return model.get_base_model()
    return getattr(model, "base_model", model)


@torch.no_grad()
def prompt_attention(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    n_prompt: int,
    keys: Sequence[int] | None = None,
) -> dict[int, tuple[float, float]]:
    """Per-layer attention mass between the input tokens and the ``n_prompt`` leading slots.

    ``model(**batch, output_attentions=True)`` must return one ``[B, H, n+T, n+T]`` probability
    tensor per layer, the ``n_prompt`` slots first (a :class:`~capt.model.CapsuleModel`, or a peft
    prompt-tuning / P-tuning model: both prepend their slots to the input).

    Args:
        model: the wrapped model, its base on eager attention.
        batch: ``input_ids [B, T]`` and optionally ``attention_mask [B, T]`` (0 = padding).
        n_prompt: number of leading prompt slots (>= 1).
        keys: the prompt slots whose mass counts as "to the prompt" (default all); ``[0]`` gives
            the attention on the first slot alone (CaPT's anchor against PT's first slot).

    Returns:
        ``{layer: (input→prompt, prompt→input)}``: the attention mass real input queries put on
        the ``keys`` slots, and the mass the prompt queries put on real input tokens (0 in a
        causal model: a leading slot cannot attend forward), averaged over heads and queries.

    Example:
        >>> import capt
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> base = LlamaForCausalLM(
        ...     LlamaConfig(
        ...         vocab_size=16,
        ...         hidden_size=8,
        ...         intermediate_size=16,
        ...         num_hidden_layers=2,
        ...         num_attention_heads=2,
        ...         attn_implementation="eager",
        ...     )
        ... )
        >>> model = capt.get_peft_model(base, capt.CapsuleConfig())
        >>> out = prompt_attention(model, {"input_ids": torch.tensor([[3, 4, 5]])}, 1)
        >>> sorted(out), out[0][1]
        ([0, 1], 0.0)
    """
    if isinstance(n_prompt, bool) or not isinstance(n_prompt, int) or n_prompt < 1:
        raise ValueError(f"n_prompt: expected an int >= 1, got {n_prompt!r}")
    if not isinstance(batch, Mapping) or not isinstance(batch.get("input_ids"), torch.Tensor):
        raise TypeError("batch: expected a mapping with an input_ids tensor [B, T]")
    keys = list(range(n_prompt)) if keys is None else list(keys)
    if not keys or any(
        isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < n_prompt for j in keys
    ):
        raise ValueError(f"keys: expected prompt slot indices in [0, {n_prompt}), got {keys}")
    impl = getattr(getattr(_base(model), "config", None), "_attn_implementation", None)
    if impl != "eager":
        raise ValueError(
            f"model: attention probabilities need attn_implementation='eager', got {impl!r}"
        )
    ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    mask = torch.ones_like(ids) if mask is None else mask
    out = model(**batch, output_attentions=True)
    attentions = getattr(out, "attentions", None)
    if attentions is None:
        raise ValueError("model: returned no self-attentions (a decoder-only model is expected)")
    if attentions[0].shape[-1] != n_prompt + ids.shape[1]:
        got = tuple(attentions[0].shape)
        raise ValueError(
            f"n_prompt: expected attention over {n_prompt} slots + {ids.shape[1]} tokens, got {got}"
        )
    real = mask.bool().to(attentions[0].device)  # [B, T]
    result = {}
    for layer, probs in enumerate(attentions):
        p = probs.double().mean(1)  # [B, n+T, n+T], mean over heads
        to_prompt = p[:, n_prompt:, keys].sum(-1)  # [B, T] per input query
        from_prompt = (p[:, :n_prompt, n_prompt:] * real[:, None, :]).sum(-1)  # [B, n]
        result[layer] = (float(to_prompt[real].mean()), float(from_prompt.mean()))
    return result
