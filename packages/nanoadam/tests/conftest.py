"""Shared fixtures for the nanoadam tests."""

import pytest

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny tensors on a shared 2-core machine: one intra-op thread."""
    with single_thread():
        yield
