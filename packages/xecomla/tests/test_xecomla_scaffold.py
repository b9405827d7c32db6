"""Smoke tests for the xecomla scaffold (replace with the package's real tests)."""

import xecomla
from xecomla.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(xecomla.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "xecomla"
    assert SUITE.cases, "the suite declares at least one case"
