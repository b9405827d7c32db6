"""Naive, readable reference implementations of codegemm: the spec in code (float64-capable)."""
