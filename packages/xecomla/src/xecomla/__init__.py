"""Zebra-Llama: Towards Extremely Efficient Hybrid Models (NeurIPS 2025)."""

__all__: list[str] = []
