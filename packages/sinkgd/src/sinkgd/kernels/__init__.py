"""Triton kernels of sinkgd (imported lazily by :mod:`sinkgd.ops`; never at package import)."""
