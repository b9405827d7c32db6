"""Triton kernels (imported lazily by ops.py)."""
