"""Smoke tests for the diloco scaffold (replace with the package's real tests)."""

import diloco
from diloco.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(diloco.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "diloco"
    assert SUITE.cases, "the suite declares at least one case"
