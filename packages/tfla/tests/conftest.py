"""Shared input factory for the tfla tests."""

from __future__ import annotations

import pytest
import torch

from neurips25_core.testing import randn


def _make(
    B,
    H,
    S,
    Dk,
    Dv,
    *,
    dtype=torch.float32,
    seed=0,
    states=False,
    i_shift=0.0,
    i_scale=1.0,
    f_shift=2.0,
    f_scale=1.0,
    requires_grad=True,
):
    """Random mLSTM inputs: [q, k, v, i, f] (+ [c0, n0, m0] with ``states``)."""
    xs = [
        randn(B, H, S, Dk, seed=seed + 1, dtype=dtype),
        randn(B, H, S, Dk, seed=seed + 2, dtype=dtype),
        randn(B, H, S, Dv, seed=seed + 3, dtype=dtype),
        randn(B, H, S, seed=seed + 4, dtype=dtype, scale=i_scale) + i_shift,
        randn(B, H, S, seed=seed + 5, dtype=dtype, scale=f_scale) + f_shift,
    ]
    if states:
        xs += [
            randn(B, H, Dk, Dv, seed=seed + 6, dtype=dtype),
            randn(B, H, Dk, seed=seed + 7, dtype=dtype),
            randn(B, H, 1, seed=seed + 8, dtype=dtype),
        ]
    return [x.detach().requires_grad_(requires_grad) for x in xs]


@pytest.fixture
def make_inputs():
    return _make
