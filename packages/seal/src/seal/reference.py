"""Naive, readable reference implementations of seal: the spec in code (float64-capable)."""
