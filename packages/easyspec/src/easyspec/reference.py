"""Naive, readable reference implementations of easyspec: the spec in code (float64-capable)."""
