"""Scaling Law with Learning Rate Annealing (NeurIPS 2025)."""

__all__: list[str] = []
