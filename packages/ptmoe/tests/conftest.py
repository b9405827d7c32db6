"""Shared settings for the ptmoe tests."""

from __future__ import annotations

import pytest

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny tensors: one intra-op thread on the shared 2-core machine (restored after)."""
    with single_thread():
        yield
