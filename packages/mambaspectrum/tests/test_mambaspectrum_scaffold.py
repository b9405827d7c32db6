"""Smoke tests for the mambaspectrum scaffold (replace with the package's real tests)."""

import mambaspectrum
from mambaspectrum.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(mambaspectrum.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "mambaspectrum"
    assert SUITE.cases, "the suite declares at least one case"
