"""Harmony in Divergence: Towards Fast, Accurate, and Memory-efficient Zeroth-order LLM Fine-tuning (DiZO) (NeurIPS 2025)."""

__all__: list[str] = []
