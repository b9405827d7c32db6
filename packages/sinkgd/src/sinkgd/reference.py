"""Naive, readable reference implementations of sinkgd: the spec in code (float64-capable)."""
