"""Mamba Modulation: On the Length Generalization of Mamba Models (NeurIPS 2025)."""

__all__: list[str] = []
