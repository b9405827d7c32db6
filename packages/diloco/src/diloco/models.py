"""Tiny Llama models for the reduced reproduction (byte vocabulary), and the z-loss.

The paper trains a Chinchilla-style decoder with QK-LayerNorm and z-loss 1e-4. ``LlamaConfig`` has
no QK-norm, and we keep the architecture the core provides rather than silently changing it (the
README says so); the z-loss is added here.

>>> cfg = ladder_config(16)
>>> n = count_parameters(cfg)
>>> 15_000 < n < 18_000
True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LADDER", "count_parameters", "ladder_config", "lm_loss"]

#: The issue's ladder: hidden 16/24/32/48, two layers (about 16K to 80K parameters).
LADDER: tuple[int, ...] = (16, 24, 32, 48)


def ladder_config(hidden: int, layers: int = 2, heads: int | None = None, seq_len: int = 128):
    """A ``LlamaConfig`` of width ``hidden`` (head size 8, or 4 when 8 does not divide it)."""
    from neurips25_core.models import tiny_llama_config

    if not isinstance(hidden, int) or hidden < 4 or hidden % 4:
        raise ValueError(f"hidden: expected a multiple of 4 >= 4, got {hidden!r}")
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers: expected an int >= 1, got {layers!r}")
    if heads is None:  # head size 8 where the width allows, else 4
        heads = hidden // 8 if hidden % 8 == 0 else hidden // 4
    return tiny_llama_config(
        hidden_size=hidden, num_layers=layers, num_heads=heads, max_position_embeddings=seq_len
    )


def count_parameters(config) -> int:
    """N: every parameter of ``LlamaForCausalLM(config)`` (embeddings included)."""
    from neurips25_core.models import tiny_llama

    with torch.device("meta"):
        model = tiny_llama(config)
    return sum(p.numel() for p in model.parameters())


def lm_loss(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, z_loss: float = 0.0
) -> torch.Tensor:
    """Next-token cross-entropy (nats) plus ``z_loss · mean(logsumexp(logits)²)``."""
    out = model(x)
    logits = (out.logits if hasattr(out, "logits") else out).float()
    flat = logits.reshape(-1, logits.shape[-1])
    loss = F.cross_entropy(flat, y.reshape(-1))
    if z_loss:
        loss = loss + z_loss * torch.logsumexp(flat, dim=-1).square().mean()
    return loss
