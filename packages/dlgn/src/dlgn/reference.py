"""Naive, readable reference implementations of dlgn: the spec in code (float64-capable)."""
