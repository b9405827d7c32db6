"""Smoke tests for the andpro scaffold (replace with the package's real tests)."""

import andpro
from andpro.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(andpro.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "andpro"
    assert SUITE.cases, "the suite declares at least one case"
