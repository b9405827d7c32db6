"""Every jetnemotron test runs on one intra-op thread.

The tests use tiny tensors; on a shared two-core machine two OpenMP threads spin-wait for each
other and a 2×2 ``tril`` took 36 ms instead of 9 µs (measured at load ~15).
"""

import pytest

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield
