"""Naive, readable reference implementations of paretoq: the spec in code (float64-capable)."""
