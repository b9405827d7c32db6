"""Evaluation: perplexity against length."""

from __future__ import annotations

import math

import torch

from .calibrate import sequence_nll


@torch.no_grad()
def ppl_vs_length(model, ids: torch.Tensor, lengths) -> dict[int, float]:
    """Perplexity of ``ids[:, :T]`` (loss over all positions, one window) for every ``T`` in ``lengths``."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        raise ValueError("ids: expected a 2-D integer tensor (n, L)")
    out = {}
    for t in lengths:
        if not 2 <= int(t) <= ids.shape[1]:
            raise ValueError(f"lengths: expected values in [2, {ids.shape[1]}], got {t}")
        out[int(t)] = math.exp(sequence_nll(model, ids[:, : int(t)]))
    return out
