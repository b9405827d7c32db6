"""Smoke tests for the sinkgd scaffold (replace with the package's real tests)."""

import sinkgd
from sinkgd.bench import SUITE


def test_public_api_is_declared():
    assert isinstance(sinkgd.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "sinkgd"
    assert SUITE.cases, "the suite declares at least one case"
