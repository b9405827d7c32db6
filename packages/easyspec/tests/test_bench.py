"""The suite declares its cases in every mode (the workspace smoke test runs them)."""

from easyspec.bench import SUITE, _sizes


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "easyspec"
    assert names == {"acceptance", "draft_latency", "end_to_end"}
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names
        s = _sizes(mode)
        assert s["draft"][0] >= 4, "the draft needs middle layers to group"
