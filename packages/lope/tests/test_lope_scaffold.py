"""Smoke tests for the lope scaffold (replace with the package's real tests)."""

import lope
from lope.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(lope.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "lope"
    assert SUITE.cases, "the suite declares at least one case"
