"""Smoke tests for the codegemm scaffold (replace with the package's real tests)."""

import codegemm
from codegemm.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(codegemm.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "codegemm"
    assert SUITE.cases, "the suite declares at least one case"
