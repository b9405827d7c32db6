"""Smoke tests for the dlgn scaffold (replace with the package's real tests)."""

import dlgn
from dlgn.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(dlgn.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "dlgn"
    assert SUITE.cases, "the suite declares at least one case"
