import pytest

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models on a shared two-core machine: one thread avoids OpenMP spin-waits."""
    with single_thread():
        yield
