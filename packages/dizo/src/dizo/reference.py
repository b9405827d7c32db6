"""Naive, readable reference implementations of dizo: the spec in code (float64-capable)."""
