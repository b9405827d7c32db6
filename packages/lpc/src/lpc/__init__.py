"""Learned Prefix Caching for Efficient LLM Inference (NeurIPS 2025)."""

__all__: list[str] = []
