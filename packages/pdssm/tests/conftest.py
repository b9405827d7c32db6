"""Shared input builders for the pdssm tests (as fixtures: test modules are imported by path)."""

from __future__ import annotations

import pytest
import torch

from neurips25_core.bench import single_thread
from neurips25_core.testing import randint, randn


def _pd_inputs(batch, length, size, seed=0, dtype=torch.complex128, magnitude=(0.5, 1.0), x0=True):
    """Random indices (non-injective), contractive complex diagonals, complex inputs, x0."""
    g = torch.Generator().manual_seed(seed + 7)
    lo, hi = magnitude
    mag = lo + (hi - lo) * torch.rand(batch, length, size, generator=g, dtype=torch.float64)
    phase = 2 * torch.pi * torch.rand(batch, length, size, generator=g, dtype=torch.float64)
    d = torch.polar(mag, phase).to(dtype)
    p = randint(0, size, batch, length, size, seed=seed + 1)
    b = randn(batch, length, size, seed=seed + 2, dtype=dtype)
    x = randn(batch, size, seed=seed + 3, dtype=dtype) if x0 else None
    return p, d, b, x


@pytest.fixture
def pd_inputs():
    """``pd_inputs(B, L, N, seed=0, dtype=complex128, magnitude=(lo, hi), x0=True) -> (p, d, b, x0)``."""
    return _pd_inputs


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny tensors: one intra-op thread. On a shared 2-core machine, two threads per op made the
    smoke training ~30× slower (thread hand-off dominates), so the tests pin one and restore it."""
    with single_thread():
        yield
