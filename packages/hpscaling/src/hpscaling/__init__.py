"""Power Lines: Scaling Laws for Weight Decay and Batch Size in LLM Pre-training (NeurIPS 2025)."""

__all__: list[str] = []
