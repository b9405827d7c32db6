"""Naive, readable reference implementations of ptmoe: the spec in code (float64-capable)."""
