"""Smoke tests for the multibitq scaffold (replace with the package's real tests)."""

import multibitq
from multibitq.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(multibitq.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "multibitq"
    assert SUITE.cases, "the suite declares at least one case"
