"""Fixtures shared by the lope tests."""

from __future__ import annotations

import pytest
import torch
from lope import ops

from neurips25_core.testing import poisoned_empty


@pytest.fixture
def poisoned_buffers(monkeypatch):
    """Every output buffer of expert_mix (torch or Triton) starts as NaN, whatever
    TRITON_INTERPRET says; the fixture lists the shapes made."""
    made = []

    def buffer(*shape, dtype=torch.float32, device="cpu"):
        made.append(shape)
        return poisoned_empty(*shape, dtype=dtype, device=device)

    monkeypatch.setattr(ops, "kernel_buffer", buffer)
    return made
