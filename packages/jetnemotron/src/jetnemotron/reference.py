"""Naive, readable reference implementations of jetnemotron: the spec in code (float64-capable)."""
