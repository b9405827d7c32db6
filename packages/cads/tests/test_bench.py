from cads.bench import SUITE


def test_suite_is_named_after_the_package():
    assert SUITE.name == "cads"
    assert {c.name: c.kind for c in SUITE.cases} == {
        "digits_quality": "quality",
        "language_quality": "quality",
        "solver_speed": "speed",
        "policy_step": "speed",
    }
    assert all("smoke" in c.modes for c in SUITE.cases)
