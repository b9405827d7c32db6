"""Smoke tests for the rdfft scaffold (replace with the package's real tests)."""

import rdfft
from rdfft.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(rdfft.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "rdfft"
    assert SUITE.cases, "the suite declares at least one case"
