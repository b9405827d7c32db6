"""Accurate KV Cache Eviction via Anchor Direction Projection for Efficient LLM Inference (NeurIPS 2025)."""

__all__: list[str] = []
