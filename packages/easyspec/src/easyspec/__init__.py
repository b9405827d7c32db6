"""EasySpec: Layer-Parallel Speculative Decoding for Efficient Multi-GPU Utilization (NeurIPS 2025)."""

from .draft import FuzzyDraft, layer_groups
from .generate import SpecStats, autoregressive_generate, speculative_generate
from .sampling import chain_law, sampling_probs, verify_chain
from .tree import TokenTree, draft_tree, verify_tree_greedy, verify_tree_greedy_reference

__all__ = [
    "FuzzyDraft",
    "SpecStats",
    "TokenTree",
    "autoregressive_generate",
    "chain_law",
    "draft_tree",
    "layer_groups",
    "sampling_probs",
    "speculative_generate",
    "verify_chain",
    "verify_tree_greedy",
    "verify_tree_greedy_reference",
]
