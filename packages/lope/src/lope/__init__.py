"""Noise-Robustness Through Noise: A Framework Combining Asymmetric LoRA with Poisoning MoE (NeurIPS 2025)."""

__all__: list[str] = []
