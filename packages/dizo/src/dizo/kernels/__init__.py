"""Triton kernels of dizo (imported lazily by :mod:`dizo.ops`; importing dizo never imports Triton)."""
