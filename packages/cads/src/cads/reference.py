"""Naive, readable reference implementations of cads: the spec in code (float64-capable)."""
