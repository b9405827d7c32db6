"""Naive, readable reference implementations of lrannealing: the spec in code (float64-capable)."""
