"""Naive, readable reference implementations of pdssm: the spec in code (float64-capable)."""
