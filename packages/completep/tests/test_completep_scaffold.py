"""Smoke tests for the completep scaffold (replace with the package's real tests)."""

import completep
from completep.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(completep.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "completep"
    assert SUITE.cases, "the suite declares at least one case"
