"""Naive, readable reference implementations of diloco: the spec in code (float64-capable)."""
