"""Naive, readable reference implementations of tfla: the spec in code (float64-capable)."""
