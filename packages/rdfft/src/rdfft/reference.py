"""Naive, readable reference implementations of rdfft: the spec in code (float64-capable)."""
