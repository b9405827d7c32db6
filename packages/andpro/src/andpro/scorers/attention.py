"""The attention-only ablation: AnDPro's pipeline scored by pooled attention alone."""

from __future__ import annotations

import torch

from andpro import scoring
from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["AttentionScorer"]


class AttentionScorer(Scorer):
    """``s_j = sum_i a_ij`` with AnDPro's window, max-pooling, chunks and head allocation.

    Only the scoring rule differs from :class:`~andpro.scorers.AnDProScorer` (the key ablation; with
    adaptive heads it is Ada-SnapKV with max-pooling and chunks).

    Args:
        pooling: ``"max"`` (default) or ``"avg"``.
        gqa_reduce: ``"sum"`` (default), ``"mean"`` or ``"per_qhead"``.
    """

    name = "attention"
    gqa_reduce = "sum"

    def __init__(self, pooling: str = "max", gqa_reduce: str | None = None) -> None:
        super().__init__(gqa_reduce)
        if pooling not in ("max", "avg"):
            raise ValueError(f"pooling: expected 'max' or 'avg', got {pooling!r}")
        self.pooling = pooling

    def query_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        return scoring.attn_scores(ctx.pooled(self.pooling))
