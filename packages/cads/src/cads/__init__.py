"""Computational Budget Should Be Considered in Data Selection (NeurIPS 2025)."""

__all__: list[str] = []
