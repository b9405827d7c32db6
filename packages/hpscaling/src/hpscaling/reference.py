"""Naive, readable reference implementations of hpscaling: the spec in code (float64-capable)."""
