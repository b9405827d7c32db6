"""Tiled Flash Linear Attention: More Efficient Linear RNN and xLSTM Kernels (NeurIPS 2025).

The mLSTM (mLSTMexp and mLSTMsig) with chunkwise TFLA kernels: :func:`mlstm` is the op (Triton on
CUDA, torch chunkwise on CPU), :mod:`tfla.reference` holds the recurrent and parallel references,
:class:`mLSTMLayer` and :class:`mLSTMLM` are the integration.
"""

from tfla.layer import mLSTMLayer, mLSTMLM
from tfla.ops import mlstm

__all__ = ["mLSTMLM", "mLSTMLayer", "mlstm"]
