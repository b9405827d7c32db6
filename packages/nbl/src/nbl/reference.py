"""Naive, readable reference implementations of nbl: the spec in code (float64-capable)."""
