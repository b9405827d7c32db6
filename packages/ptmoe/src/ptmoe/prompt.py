"""``PromptMoE``: the routed low-rank prompt of PT-MoE as an ``nn.Module``.

``P(x) = (Σ_{i∈topk} w_i A_i) B`` with ``A [N, T, R]`` per expert, a shared ``B [R, H]`` and a
router ``W x + b`` on the masked mean of the frozen source embeddings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .config import PTMoEConfig
from .ops import compose, masked_mean, route, svd_factors

__all__ = ["PromptMoE", "PromptOutput"]


@dataclass
class PromptOutput:
    """What :class:`PromptMoE` returns.

    Attributes:
        prompts: ``[b, T, H]`` the composed prompts.
        weights: ``[b, N]`` routing weights (zeros for experts not kept).
        logits: ``[b, N]`` router logits before noise (zeros under uniform routing).
        experts: ``[b, k]`` indices of the kept experts, by descending weight.
    """

    prompts: torch.Tensor
    weights: torch.Tensor
    logits: torch.Tensor
    experts: torch.Tensor


def _check_embedding(embedding) -> nn.Embedding:
    if not isinstance(embedding, nn.Embedding):
        raise TypeError(f"embedding: expected a torch.nn.Embedding, got {type(embedding).__name__}")
    if not embedding.weight.is_floating_point():
        raise TypeError(f"embedding: expected floating-point weights, got {embedding.weight.dtype}")
    return embedding


class PromptMoE(nn.Module):
    """Routed low-rank prompt experts over a frozen embedding table.

    The embedding is held, not registered: the module's parameters (and ``state_dict``) are only
    ``A``, ``B`` and the router.

    Args:
        embedding: the base model's input embedding ``[V, H]`` (frozen; used for the router input
            and the init).
        config: a :class:`PTMoEConfig`.
        init_ids: token ids of the task description for ``init="svd"`` (repeated or truncated to
            T); without them ``"svd"`` samples vocabulary tokens like ``"vocab_svd"``.
        generator: the RNG of the init (sampled tokens, jitter, normal init); global RNG if None.

    Example:
        >>> emb = nn.Embedding(50, 16)
        >>> moe = PromptMoE(emb, PTMoEConfig(prompt_length=5, num_experts=3, rank=4)).eval()
        >>> out = moe(input_ids=torch.tensor([[1, 2, 3]]))
        >>> out.prompts.shape, out.weights.shape, out.experts.shape
        (torch.Size([1, 5, 16]), torch.Size([1, 3]), torch.Size([1, 1]))
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        config: PTMoEConfig,
        init_ids: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        embedding = _check_embedding(embedding)
        if not isinstance(config, PTMoEConfig):
            raise TypeError(f"config: expected a PTMoEConfig, got {type(config).__name__}")
        self.config = config
        self.prompt_length = config.prompt_length
        self.num_experts = config.num_experts
        self._embedding = (embedding,)  # a tuple: not a submodule, so not in state_dict
        weight = embedding.weight.detach()
        vocab, hidden = weight.shape
        n, t, r = config.num_experts, config.prompt_length, config.rank
        if config.init in ("svd", "vocab_svd") and r > min(t, hidden):
            raise ValueError(
                f"rank: the SVD init needs R <= min(T, H) = min({t}, {hidden}), got R = {r}"
            )
        if config.init == "normal":
            a0 = torch.randn(n, t, r, generator=generator, dtype=torch.float64) / math.sqrt(r)
            b0 = torch.randn(r, hidden, generator=generator, dtype=torch.float64)
            b0 = b0 * weight.double().std()
            A, B = a0, b0
        else:
            if config.init == "svd" and init_ids is not None:
                init_ids = torch.as_tensor(init_ids).flatten()
                if init_ids.numel() == 0 or init_ids.is_floating_point():
                    raise ValueError("init_ids: expected a non-empty integer tensor of token ids")
                if bool((init_ids < 0).any()) or bool((init_ids >= vocab).any()):
                    raise ValueError(f"init_ids: token ids must lie in [0, {vocab})")
                ids = init_ids.repeat(math.ceil(t / init_ids.numel()))[:t]
            else:
                ids = torch.randint(0, vocab, (t,), generator=generator)
            a0, B = svd_factors(weight[ids.to(weight.device)].double(), r)
            A = a0.expand(n, t, r).clone()
        if config.init_jitter > 0:
            std = A.std() if A.numel() > 1 else A.abs().mean()
            noise = torch.randn(A.shape, generator=generator, dtype=torch.float64)
            A = A + config.init_jitter * std * noise
        self.A = nn.Parameter(A.to(weight.device, weight.dtype))
        self.B = nn.Parameter(B.to(weight.device, weight.dtype))
        if config.routing == "uniform":
            self.router = None
        else:
            self.router = nn.Linear(
                hidden, n, bias=config.router_bias, device=weight.device, dtype=weight.dtype
            )

    @property
    def embedding(self) -> nn.Embedding:
        return self._embedding[0]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        noise: torch.Tensor | None = None,
    ) -> PromptOutput:
        """Compose one prompt per example.

        Args:
            input_ids: ``[b, S]`` token ids (or pass ``inputs_embeds``).
            inputs_embeds: ``[b, S, H]`` the frozen embeddings of the input.
            mask: ``[b, S]`` source mask (1 = the router sees the token); default all ones. It
                must exclude padding and teacher-forced answers.
            noise: ``[b, N]`` ε for the train-time noise; drawn from the global RNG when None.
                Ignored in ``eval()`` and when ``router_noise == 0``.

        Returns:
            A :class:`PromptOutput`.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("input_ids: pass exactly one of input_ids and inputs_embeds")
        hidden = self.B.shape[1]
        if input_ids is not None:
            if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point():
                raise TypeError("input_ids: expected an integer torch.Tensor [b, S]")
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids: expected shape (b, S), got {tuple(input_ids.shape)}")
            inputs_embeds = self.embedding(input_ids)
        elif not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3:
            raise ValueError("inputs_embeds: expected a tensor of shape (b, S, H)")
        if inputs_embeds.shape[-1] != hidden:
            raise ValueError(
                f"inputs_embeds: expected hidden size {hidden}, got {inputs_embeds.shape[-1]}"
            )
        batch = inputs_embeds.shape[0]
        if mask is None:
            mask = torch.ones(inputs_embeds.shape[:2], device=inputs_embeds.device)
        elif not isinstance(mask, torch.Tensor) or mask.shape != inputs_embeds.shape[:2]:
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(
                f"mask: expected shape {tuple(inputs_embeds.shape[:2])} (like input_ids), got {got}"
            )
        cfg = self.config
        n = cfg.num_experts
        if self.router is None:
            logits = torch.zeros(batch, n, device=self.A.device, dtype=self.A.dtype)
            weights = logits + 1.0 / n
            experts = torch.arange(n, device=self.A.device).expand(batch, n)
        else:
            pooled = masked_mean(inputs_embeds.detach().to(self.A.dtype), mask)
            logits = self.router(pooled)
            use_noise = self.training and cfg.router_noise > 0
            if use_noise and noise is None:
                noise = torch.randn_like(logits)
            weights, experts = route(
                logits,
                cfg.routing,
                cfg.top_k,
                noise=noise if use_noise else None,
                sigma=cfg.router_noise,
            )
        prompts = compose(self.A, self.B, weights)
        return PromptOutput(prompts=prompts, weights=weights, logits=logits, experts=experts)
