"""SnapKV (Li et al., 2024) as in kvpress: mean window attention, 1-D pooling, GQA mean."""

from __future__ import annotations

import torch

from andpro import scoring
from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["SnapKVScorer"]


class SnapKVScorer(Scorer):
    """SnapKV: mean over the window queries of the attention to the prefix keys, pooled along keys.

    kvpress defaults are ``window_size=64, kernel_size=5`` with average pooling; set them through the
    press (``window=64, pool_kernel=5``). Scores are averaged over each GQA group.

    Args:
        pooling: ``"avg"`` (default, kvpress) or ``"max"``.
        gqa_reduce: ``"mean"`` (default), ``"sum"`` or ``"per_qhead"``.
    """

    name = "snapkv"
    gqa_reduce = "mean"

    def __init__(self, pooling: str = "avg", gqa_reduce: str | None = None) -> None:
        super().__init__(gqa_reduce)
        if pooling not in ("max", "avg"):
            raise ValueError(f"pooling: expected 'max' or 'avg', got {pooling!r}")
        self.pooling = pooling

    def query_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        return scoring.snapkv_scores(
            ctx.attention(),
            ctx.num_query_heads,
            ctx.window,
            kernel_size=ctx.pool_kernel,
            pooling=self.pooling,
            gqa_reduce="per_qhead",
        )
