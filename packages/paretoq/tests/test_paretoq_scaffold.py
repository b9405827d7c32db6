"""Smoke tests for the paretoq scaffold (replace with the package's real tests)."""

import paretoq
from paretoq.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(paretoq.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "paretoq"
    assert SUITE.cases, "the suite declares at least one case"
