"""Smoke tests for the qcs scaffold (replace with the package's real tests)."""

import qcs
from qcs.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(qcs.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "qcs"
    assert SUITE.cases, "the suite declares at least one case"
