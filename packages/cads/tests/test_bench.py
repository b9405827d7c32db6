from cads.bench import SUITE


def test_suite_is_named_after_the_package():
    assert SUITE.name == "cads"
    assert SUITE.cases, "the suite declares at least one case"
