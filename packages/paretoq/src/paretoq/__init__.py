"""ParetoQ: Scaling Laws in Extremely Low-bit LLM Quantization (NeurIPS 2025)."""

__all__: list[str] = []
