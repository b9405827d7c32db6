"""Minitron-SSM: Efficient Hybrid Language Model Compression through Group-Aware SSM Pruning (NeurIPS 2025)."""

__all__: list[str] = []
