"""Smoke tests for the cads scaffold (replace with the package's real tests)."""

import cads
from cads.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(cads.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "cads"
    assert SUITE.cases, "the suite declares at least one case"
