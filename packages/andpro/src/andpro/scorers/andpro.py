"""AnDPro: the signed projection of each token's attention-weighted value onto the anchor."""

from __future__ import annotations

import torch

from andpro import scoring
from andpro.scorers.base import Scorer, ScoringContext

__all__ = ["AnDProScorer"]


class AnDProScorer(Scorer):
    """AnDPro (NeurIPS 2025): ``s_j = <v_j, sum_i a_ij d_i>``, ``d_i = sum_{j in D} a_ij v_j``.

    ``a`` is the window attention max-pooled along keys (kernel = the press's ``pool_kernel``) and
    ``D`` the evictable tokens. The score is signed: a highly attended token whose value points
    against the anchor ranks low. Over a GQA group the scores are summed (``gqa_reduce="sum"``):
    evicting a shared token costs the group's summed error.

    Args:
        pooling: ``"max"`` (official) or ``"avg"``.
        normalize_anchor: divide the anchor by its norm (paper view; off in the official code).
        gqa_reduce: ``"sum"`` (default), ``"mean"`` or ``"per_qhead"``.
    """

    name = "andpro"
    gqa_reduce = "sum"

    def __init__(
        self, pooling: str = "max", normalize_anchor: bool = False, gqa_reduce: str | None = None
    ) -> None:
        super().__init__(gqa_reduce)
        if pooling not in ("max", "avg"):
            raise ValueError(f"pooling: expected 'max' or 'avg', got {pooling!r}")
        self.pooling = pooling
        self.normalize_anchor = bool(normalize_anchor)

    def query_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        return scoring.andpro_scores(
            ctx.pooled(self.pooling),
            ctx.values,
            ctx.candidates(),
            normalize_anchor=self.normalize_anchor,
        )
