"""Structured Sparse Transition Matrices to Enable State Tracking in State-Space Models (NeurIPS 2025)."""

__all__: list[str] = []
