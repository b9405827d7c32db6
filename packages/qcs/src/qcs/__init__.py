"""Quadratic Coreset Selection: Certifying and Reconciling Sequence and Token Mining for Efficient Instruction Tuning (NeurIPS 2025)."""

__all__: list[str] = []
