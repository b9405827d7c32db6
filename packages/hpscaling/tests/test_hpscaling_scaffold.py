"""Smoke tests for the hpscaling scaffold (replace with the package's real tests)."""

import hpscaling
from hpscaling.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(hpscaling.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "hpscaling"
    assert SUITE.cases, "the suite declares at least one case"
