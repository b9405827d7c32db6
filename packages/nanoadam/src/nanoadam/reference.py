"""Naive, readable reference implementations of nanoadam: the spec in code (float64-capable)."""
