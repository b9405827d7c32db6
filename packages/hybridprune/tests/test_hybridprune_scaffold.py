"""Smoke tests for the hybridprune scaffold (replace with the package's real tests)."""

import hybridprune
from hybridprune.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(hybridprune.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "hybridprune"
    assert SUITE.cases, "the suite declares at least one case"
