"""Naive, readable reference implementations of hybridprune: the spec in code (float64-capable)."""
