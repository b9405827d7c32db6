"""The benchmark suite's declaration (tests/test_smoke.py runs every case at smoke size)."""

from lope.bench import SUITE


def test_suite_is_named_after_the_package_and_has_the_speed_case():
    assert SUITE.name == "lope"
    assert "expert_mix_speed" in {case.name for case in SUITE.cases}
