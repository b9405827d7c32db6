"""Triton TFLA kernels for the mLSTM. Imported lazily (importing ``tfla`` never imports triton)."""

from __future__ import annotations

__all__ = ["mlstm_triton"]


def mlstm_triton(*args, **kwargs):
    """See :func:`tfla.kernels.autograd.mlstm_triton` (imports triton on first call)."""
    from tfla.kernels.autograd import mlstm_triton as _impl

    return _impl(*args, **kwargs)
