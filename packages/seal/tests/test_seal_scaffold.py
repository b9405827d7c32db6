"""Smoke tests for the seal scaffold (replace with the package's real tests)."""

import seal
from seal.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(seal.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "seal"
    assert SUITE.cases, "the suite declares at least one case"
