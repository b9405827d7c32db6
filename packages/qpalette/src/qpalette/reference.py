"""Naive, readable reference implementations of qpalette: the spec in code (float64-capable)."""
