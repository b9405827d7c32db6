"""Efficient Large Language Model Inference with Neural Block Linearization (NBL) (NeurIPS 2025)."""

__all__: list[str] = []
