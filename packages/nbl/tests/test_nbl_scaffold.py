"""Smoke tests for the nbl scaffold (replace with the package's real tests)."""

import nbl
from nbl.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(nbl.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "nbl"
    assert SUITE.cases, "the suite declares at least one case"
