"""Smoke tests for the tfla scaffold (replace with the package's real tests)."""

import tfla
from tfla.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(tfla.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "tfla"
    assert SUITE.cases, "the suite declares at least one case"
