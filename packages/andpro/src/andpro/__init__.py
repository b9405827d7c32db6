"""AnDPro: KV-cache eviction by anchor-direction projection (NeurIPS 2025), as a press library.

- :mod:`andpro.scorers`: ``AnDProScorer`` and the baselines, one file each over ``Scorer``;
- :class:`Press`: a context manager compressing each layer's cache at prefill to ``budget`` tokens
  per KV head (exact per-head budgets through :class:`PressCache` and the ``"andpro"`` attention);
- :func:`generate`: greedy decoding with a press;
- :mod:`andpro.scoring`, :mod:`andpro.select`: the tensor-level pipeline; :mod:`andpro.reference`:
  its float64 loop reference; :mod:`andpro.metrics`: attention-output error.
"""

from andpro import metrics, reference, scoring
from andpro.cache import PressCache
from andpro.generate import generate
from andpro.press import Press
from andpro.scorers import (
    AnDProScorer,
    AttentionScorer,
    KNormScorer,
    RandomScorer,
    Scorer,
    ScoringContext,
    SnapKVScorer,
    StreamingLLMScorer,
)
from andpro.select import select_keep

__all__ = [
    "AnDProScorer",
    "AttentionScorer",
    "KNormScorer",
    "Press",
    "PressCache",
    "RandomScorer",
    "Scorer",
    "ScoringContext",
    "SnapKVScorer",
    "StreamingLLMScorer",
    "generate",
    "metrics",
    "reference",
    "scoring",
    "select_keep",
]
