"""Minitron-SSM: Efficient Hybrid Language Model Compression through Group-Aware SSM Pruning (NeurIPS 2025).

Group-aware structured pruning of transformers hybrid Mamba2 + attention models, the baselines
(``mamba_strategy=``, ``hybridprune.masks``) and the torch-pruning peer (``hybridprune.peers``); see
the README for what was measured.
"""

from hybridprune.distill import distill, kd_loss
from hybridprune.importance import Importance, collect_importance
from hybridprune.prune import MAMBA_STRATEGIES, PruneTarget, count_params, prune
from hybridprune.ranking import rank_attention_heads, rank_channels, rank_mamba
from hybridprune.search import search

__all__ = [
    "MAMBA_STRATEGIES",
    "Importance",
    "PruneTarget",
    "collect_importance",
    "count_params",
    "distill",
    "kd_loss",
    "prune",
    "rank_attention_heads",
    "rank_channels",
    "rank_mamba",
    "search",
]
