"""Naive, readable reference implementations of completep: the spec in code (float64-capable)."""
