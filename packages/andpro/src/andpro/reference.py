"""Naive, readable reference implementations of andpro: the spec in code (float64-capable)."""
