"""Naive, readable reference implementations of lope: the spec in code (float64-capable)."""
