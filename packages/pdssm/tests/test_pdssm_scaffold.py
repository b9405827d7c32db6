"""Smoke tests for the pdssm scaffold (replace with the package's real tests)."""

import pdssm
from pdssm.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(pdssm.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "pdssm"
    assert SUITE.cases, "the suite declares at least one case"
