"""Smoke tests for the easyspec scaffold (replace with the package's real tests)."""

import easyspec
from easyspec.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(easyspec.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "easyspec"
    assert SUITE.cases, "the suite declares at least one case"
