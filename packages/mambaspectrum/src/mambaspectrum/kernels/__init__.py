"""Triton kernels (imported lazily: importing :mod:`mambaspectrum` never imports triton)."""
