"""Triton kernels and launchers (imported lazily: importing ``jetnemotron`` never imports triton)."""

from __future__ import annotations

__all__ = ["dynamic_conv_triton", "gated_delta_rule_triton"]


def gated_delta_rule_triton(*args, **kwargs):
    """See :func:`jetnemotron.kernels.autograd.gated_delta_rule_triton` (imports triton on first call)."""
    from jetnemotron.kernels.autograd import gated_delta_rule_triton as _impl

    return _impl(*args, **kwargs)


def dynamic_conv_triton(*args, **kwargs):
    """See :func:`jetnemotron.kernels.autograd.dynamic_conv_triton` (imports triton on first call)."""
    from jetnemotron.kernels.autograd import dynamic_conv_triton as _impl

    return _impl(*args, **kwargs)
