"""Scorers: one small base class, one file per method. ``score(ctx) -> [B, H, L]``, higher = keep."""

from andpro.scorers.andpro import AnDProScorer
from andpro.scorers.attention import AttentionScorer
from andpro.scorers.base import Scorer, ScoringContext
from andpro.scorers.knorm import KNormScorer
from andpro.scorers.random_scorer import RandomScorer
from andpro.scorers.snapkv import SnapKVScorer
from andpro.scorers.streaming import StreamingLLMScorer

__all__ = [
    "AnDProScorer",
    "AttentionScorer",
    "KNormScorer",
    "RandomScorer",
    "Scorer",
    "ScoringContext",
    "SnapKVScorer",
    "StreamingLLMScorer",
]
