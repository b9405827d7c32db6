"""Smoke tests for the flashdp scaffold (replace with the package's real tests)."""

import flashdp
from flashdp.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(flashdp.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "flashdp"
    assert SUITE.cases, "the suite declares at least one case"
