"""Naive, readable reference implementations of multibitq: the spec in code (float64-capable)."""
