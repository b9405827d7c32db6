"""Triton kernels of flashdp (imported lazily: importing flashdp never imports triton)."""

from __future__ import annotations


def clipped_weight_grad_triton(*args, **kwargs):
    """Launch the streamed two-phase kernels (see :mod:`flashdp.kernels.streamed`)."""
    from .streamed import clipped_weight_grad_streamed

    return clipped_weight_grad_streamed(*args, **kwargs)
