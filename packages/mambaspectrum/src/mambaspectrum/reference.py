"""Naive, readable reference implementations of mambaspectrum: the spec in code (float64-capable)."""
