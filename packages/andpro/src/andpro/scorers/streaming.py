"""StreamingLLM (Xiao et al., 2024): attention sinks plus the most recent tokens."""

from __future__ import annotations

import torch

from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["StreamingLLMScorer"]


class StreamingLLMScorer(Scorer):
    """Score = position, so the press keeps its sinks and the most recent tokens."""

    name = "streaming_llm"

    def kv_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        b, h, length, _ = ctx.keys.shape
        pos = torch.arange(length, device=ctx.keys.device, dtype=torch.float32)
        return pos.expand(b, h, length).clone()
