"""Naive, readable reference implementations of ultradelta: the spec in code (float64-capable)."""
