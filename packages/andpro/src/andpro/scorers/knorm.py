"""KNorm (Devoto et al., 2024, arXiv 2406.11430): keep the keys with the smallest L2 norm."""

from __future__ import annotations

import torch

from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["KNormScorer"]


class KNormScorer(Scorer):
    """Score = ``-||k_j||`` (post-RoPE keys; RoPE preserves the norm)."""

    name = "knorm"

    def kv_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        return -ctx.keys.float().norm(dim=-1)
