"""Naive, readable reference implementations of qcs: the spec in code (float64-capable)."""
