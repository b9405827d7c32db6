"""Gradient Multi-Normalization for Efficient LLM Training (NeurIPS 2025)."""

__all__: list[str] = []
