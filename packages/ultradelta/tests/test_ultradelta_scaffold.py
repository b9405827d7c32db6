"""Smoke tests for the ultradelta scaffold (replace with the package's real tests)."""

import ultradelta
from ultradelta.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(ultradelta.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "ultradelta"
    assert SUITE.cases, "the suite declares at least one case"
