"""Smoke tests for the dizo scaffold (replace with the package's real tests)."""

import dizo
from dizo.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(dizo.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "dizo"
    assert SUITE.cases, "the suite declares at least one case"
