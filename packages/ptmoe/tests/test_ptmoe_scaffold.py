"""Smoke tests for the ptmoe scaffold (replace with the package's real tests)."""

import ptmoe
from ptmoe.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(ptmoe.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "ptmoe"
    assert SUITE.cases, "the suite declares at least one case"
