"""The attention-only ablation: AnDPro's pipeline scored by pooled attention alone."""

from __future__ import annotations

import torch

from andpro import scoring
from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["AttentionScorer"]


class AttentionScorer(Scorer):
    """``s_j = sum_i pool(a_i)_j`` with AnDPro's window, max-pooling, chunks and head allocation.

    Only the scoring rule differs from :class:`~andpro.scorers.AnDProScorer`: the key ablation of the
    official code (its attention-only score). Each window query's attention row ``a_i`` over the
    keys is max-pooled along keys first (per query head and per query), then the pooled rows are
    summed over the window queries, summed over chunks of ``chunk_size`` and over the GQA group.
    This is **not** SnapKV / Ada-SnapKV, which average the window queries' rows first and pool the
    mean (average pooling, GQA mean; see :class:`~andpro.scorers.SnapKVScorer`): pooling each row
    before the sum lets one sharply attended key spread to its neighbours per query, and a max of
    sums is not a sum of maxes. With ``head_budget="adaptive"`` the heads share one top-k, as in AdaKV.

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
