"""Naive, readable reference implementations of flashdp: the spec in code (float64-capable)."""
