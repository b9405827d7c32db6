"""The baselines PT-MoE is compared with, on the same prepend machinery (``PromptTunedModel``).

* :class:`PromptTuning` — T free prompt vectors (Lester et al.), sampled-vocabulary init.
* :class:`DecomposedPromptTuning` — one low-rank prompt ``A B`` (DPT; N = 1, no router).
* :class:`SMoP` — N full short prompts and a noisy top-1, bias-free router, no decomposition
  (the "MoE-PT without decomposition" arm); the chosen prompt is scaled by its probability, as
  PT-MoE's experts are.

Each encoder maps ``(inputs_embeds [b, S, H], mask [b, S])`` to a :class:`PromptOutput` and has
``prompt_length`` and ``num_experts`` attributes; wrap it with :func:`apply_prompt`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .model import PromptTunedModel
from .ops import masked_mean, route, svd_factors
from .prompt import PromptOutput, _check_embedding

__all__ = ["DecomposedPromptTuning", "PromptTuning", "SMoP", "apply_prompt"]


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name}: expected >= 1, got {value}")
    return value


def _init_rows(weight: torch.Tensor, length: int, init_ids, generator) -> torch.Tensor:
    """``length`` embedding rows: ``init_ids`` repeated/truncated, else sampled vocabulary ids."""
    vocab = weight.shape[0]
    if init_ids is not None:
        ids = torch.as_tensor(init_ids).flatten()
        if ids.numel() == 0 or ids.is_floating_point():
            raise ValueError("init_ids: expected a non-empty integer tensor of token ids")
        if bool((ids < 0).any()) or bool((ids >= vocab).any()):
            raise ValueError(f"init_ids: token ids must lie in [0, {vocab})")
        ids = ids.repeat(math.ceil(length / ids.numel()))[:length]
    else:
        ids = torch.randint(0, vocab, (length,), generator=generator)
    return weight.detach()[ids.to(weight.device)].clone()


def _embeds(encoder, input_ids, inputs_embeds):
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("input_ids: pass exactly one of input_ids and inputs_embeds")
    return encoder._embedding[0](input_ids) if input_ids is not None else inputs_embeds


def _single(prompt: torch.Tensor, batch: int) -> PromptOutput:
    ones = torch.ones(batch, 1, dtype=prompt.dtype, device=prompt.device)
    return PromptOutput(
        prompts=prompt.unsqueeze(0).expand(batch, *prompt.shape),
        weights=ones,
        logits=torch.zeros_like(ones),
        experts=torch.zeros(batch, 1, dtype=torch.long, device=prompt.device),
    )


class PromptTuning(nn.Module):
    """T trainable prompt vectors ``[T, H]``, initialised from embedding rows (peft's SAMPLE_VOCAB).

    Example:
        >>> pt = PromptTuning(nn.Embedding(20, 8), prompt_length=5)
        >>> pt(input_ids=torch.tensor([[1, 2]])).prompts.shape
        torch.Size([1, 5, 8])
    """

    num_experts = 1

    def __init__(self, embedding: nn.Embedding, prompt_length: int, init_ids=None, generator=None):
        super().__init__()
        weight = _check_embedding(embedding).weight
        self.prompt_length = _positive("prompt_length", prompt_length)
        self._embedding = (embedding,)
        self.prompt = nn.Parameter(_init_rows(weight, prompt_length, init_ids, generator))

    def forward(self, input_ids=None, inputs_embeds=None, mask=None) -> PromptOutput:
        embeds = _embeds(self, input_ids, inputs_embeds)
        return _single(self.prompt, embeds.shape[0])


class DecomposedPromptTuning(nn.Module):
    """One low-rank prompt ``A B`` (``A [T, R]``, ``B [R, H]``), SVD-initialised from embedding rows."""

    num_experts = 1

    def __init__(
        self, embedding: nn.Embedding, prompt_length: int, rank: int, init_ids=None, generator=None
    ):
        super().__init__()
        weight = _check_embedding(embedding).weight
        self.prompt_length = _positive("prompt_length", prompt_length)
        _positive("rank", rank)
        if rank > min(prompt_length, weight.shape[1]):
            raise ValueError(
                f"rank: the SVD init needs R <= min(T, H) = min({prompt_length}, {weight.shape[1]}), got R = {rank}"
            )
        self._embedding = (embedding,)
        A, B = svd_factors(_init_rows(weight, prompt_length, init_ids, generator).double(), rank)
        self.A = nn.Parameter(A.to(weight.dtype))
        self.B = nn.Parameter(B.to(weight.dtype))

    def forward(self, input_ids=None, inputs_embeds=None, mask=None) -> PromptOutput:
        embeds = _embeds(self, input_ids, inputs_embeds)
        return _single(self.A @ self.B, embeds.shape[0])


class SMoP(nn.Module):
    """N short full prompts ``[N, T_short, H]`` and a noisy top-1 router ``W x`` (no bias).

    Args:
        embedding: the frozen input embedding.
        num_experts: N prompts.
        prompt_length: T_short, the length of each (the prepended length).
        router_noise: σ of the train-time multiplicative noise.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        num_experts: int,
        prompt_length: int,
        router_noise: float = 1.0,
        generator=None,
    ):
        super().__init__()
        weight = _check_embedding(embedding).weight
        self.num_experts = _positive("num_experts", num_experts)
        self.prompt_length = _positive("prompt_length", prompt_length)
        if not router_noise >= 0:
            raise ValueError(f"router_noise: expected >= 0, got {router_noise}")
        self.router_noise = float(router_noise)
        self._embedding = (embedding,)
        rows = _init_rows(weight, num_experts * prompt_length, None, generator)
        self.prompts = nn.Parameter(rows.reshape(num_experts, prompt_length, -1))
        self.router = nn.Linear(
            weight.shape[1], num_experts, bias=False, device=weight.device, dtype=weight.dtype
        )

    def forward(self, input_ids=None, inputs_embeds=None, mask=None, noise=None) -> PromptOutput:
        embeds = _embeds(self, input_ids, inputs_embeds)
        if mask is None:
            mask = torch.ones(embeds.shape[:2], device=embeds.device)
        logits = self.router(masked_mean(embeds.detach().to(self.prompts.dtype), mask))
        use_noise = self.training and self.router_noise > 0
        if use_noise and noise is None:
            noise = torch.randn_like(logits)
        weights, experts = route(
            logits, "topk", 1, noise=noise if use_noise else None, sigma=self.router_noise
        )
        prompts = torch.einsum("bn,nth->bth", weights, self.prompts)
        return PromptOutput(prompts=prompts, weights=weights, logits=logits, experts=experts)


def apply_prompt(model: nn.Module, prompt_encoder: nn.Module) -> PromptTunedModel:
    """Freeze ``model`` and prepend ``prompt_encoder``'s prompts (the baselines' ``get_peft_model``).

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> base = LlamaForCausalLM(
        ...     LlamaConfig(
        ...         vocab_size=32,
        ...         hidden_size=16,
        ...         num_hidden_layers=1,
        ...         num_attention_heads=2,
        ...         num_key_value_heads=2,
        ...         intermediate_size=32,
        ...     )
        ... )
        >>> model = apply_prompt(base, PromptTuning(base.get_input_embeddings(), 4))
        >>> model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 7, 32])
    """
    return PromptTunedModel(model, prompt_encoder)
