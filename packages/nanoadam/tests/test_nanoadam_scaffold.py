"""Smoke tests for the nanoadam scaffold (replace with the package's real tests)."""

import nanoadam
from nanoadam.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(nanoadam.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "nanoadam"
    assert SUITE.cases, "the suite declares at least one case"
