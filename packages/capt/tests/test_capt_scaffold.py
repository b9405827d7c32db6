"""Smoke tests for the capt scaffold (replace with the package's real tests)."""

import capt
from capt.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(capt.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "capt"
    assert SUITE.cases, "the suite declares at least one case"
