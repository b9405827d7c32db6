"""Smoke tests for the lrannealing scaffold (replace with the package's real tests)."""

import lrannealing
from lrannealing.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(lrannealing.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "lrannealing"
    assert SUITE.cases, "the suite declares at least one case"
