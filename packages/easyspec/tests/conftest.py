import pytest

from neurips25_core.bench import single_thread


@pytest.fixture(autouse=True)
def _single_thread():
    with single_thread():
        yield
