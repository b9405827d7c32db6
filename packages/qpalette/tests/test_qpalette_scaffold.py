"""Smoke tests for the qpalette scaffold (replace with the package's real tests)."""

import qpalette
from qpalette.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(qpalette.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "qpalette"
    assert SUITE.cases, "the suite declares at least one case"
