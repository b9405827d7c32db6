"""Learned Prefix Caching for Efficient LLM Inference (NeurIPS 2025).

A block radix prefix cache with pluggable eviction (LRU, FIFO, Belady, LPC and its oracle), the
continuation predictor, a synthetic multi-turn trace generator and a trace-driven simulator.
Submodules are imported lazily, so ``import lpc`` stays light (no torch, no scikit-learn).
"""

from __future__ import annotations

import importlib

__all__ = [
    "BeladyPolicy",
    "BlockRadixCache",
    "ContinuationMLP",
    "FIFOPolicy",
    "HashingTextEncoder",
    "LPCPolicy",
    "LRUPolicy",
    "LibCacheSimPolicy",
    "OraclePolicy",
    "Predictor",
    "Request",
    "build_predictor_text",
    "continuation_prob",
    "load_sharegpt_json",
    "make_synthetic_trace",
    "simulate",
    "size_at_hit_ratio",
    "size_reduction",
    "static_key",
    "train_predictor",
]

_WHERE = {
    "BlockRadixCache": "lpc.cache",
    "BeladyPolicy": "lpc.policy",
    "FIFOPolicy": "lpc.policy",
    "LPCPolicy": "lpc.policy",
    "LRUPolicy": "lpc.policy",
    "OraclePolicy": "lpc.policy",
    "ContinuationMLP": "lpc.predictor",
    "HashingTextEncoder": "lpc.predictor",
    "Predictor": "lpc.predictor",
    "build_predictor_text": "lpc.predictor",
    "train_predictor": "lpc.predictor",
    "Request": "lpc.trace",
    "load_sharegpt_json": "lpc.trace",
    "make_synthetic_trace": "lpc.trace",
    "LibCacheSimPolicy": "lpc.sim",
    "simulate": "lpc.sim",
    "size_at_hit_ratio": "lpc.sim",
    "size_reduction": "lpc.sim",
    "continuation_prob": "lpc.decay",
    "static_key": "lpc.decay",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'lpc' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
