"""The suite declares its cases in every mode."""

from nbl.bench import SUITE, _spearman


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "nbl"
    assert {
        "linearization_quality",
        "decode_step",
        "accumulator_throughput",
        "model_decode",
    } <= names
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names, mode


def test_spearman():
    assert _spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert _spearman([1, 2, 3], [3, 2, 1]) == -1.0
