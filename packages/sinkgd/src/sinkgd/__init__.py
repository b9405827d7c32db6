"""Gradient Multi-Normalization for Efficient LLM Training (NeurIPS 2025): SinkGD and SWAN.

Public API:

- :func:`sr_sinkhorn`: the square-root Sinkhorn normalisation of a batch of gradient matrices.
- :class:`SinkGD`: the stateless optimizer ``W ← W − η · SR-Sinkhorn(∇W, L)`` for matrices.
- :func:`param_groups`, :class:`SinkGDWithAdam`: route embeddings, ``lm_head``, norms and biases
  to AdamW and every other matrix to SinkGD, as the paper does.
- :class:`SWAN`, :class:`SWANWithAdam`: the SWAN baseline (GradNorm + GradWhitening).
"""

from .ops import sr_sinkhorn
from .optim import SWAN, SinkGD, SinkGDWithAdam, SWANWithAdam, optimizer_state_bytes, param_groups

__all__ = [
    "SWAN",
    "SWANWithAdam",
    "SinkGD",
    "SinkGDWithAdam",
    "optimizer_state_bytes",
    "param_groups",
    "sr_sinkhorn",
]
