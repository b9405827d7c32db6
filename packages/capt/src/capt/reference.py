"""Naive, readable reference implementations of capt: the spec in code (float64-capable)."""
