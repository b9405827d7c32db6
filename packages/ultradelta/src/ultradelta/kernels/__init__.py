"""Triton kernels of ultradelta (imported lazily: importing the package never imports triton)."""
