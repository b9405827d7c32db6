"""Random eviction: seeded uniform scores (the floor every scorer must beat)."""

from __future__ import annotations

import torch

from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["RandomScorer"]


class RandomScorer(Scorer):
    """Uniform random scores from ``torch.Generator`` seeded with ``seed + layer_idx``.

    Args:
        seed: base seed.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = int(seed)

    def kv_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        g = torch.Generator(device="cpu").manual_seed(self.seed + ctx.layer_idx)
        return torch.rand(ctx.keys.shape[:3], generator=g).to(ctx.keys.device)
