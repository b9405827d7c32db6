"""Naive, readable reference implementations of lpc: the spec in code (float64-capable)."""
