"""Naive, readable reference implementations of xecomla: the spec in code (float64-capable)."""
