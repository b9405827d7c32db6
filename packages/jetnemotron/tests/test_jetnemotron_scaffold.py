"""Smoke tests for the jetnemotron scaffold (replace with the package's real tests)."""

import jetnemotron
from jetnemotron.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(jetnemotron.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "jetnemotron"
    assert SUITE.cases, "the suite declares at least one case"
