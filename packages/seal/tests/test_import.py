import seal
from seal.bench import SUITE


def test_public_api_is_declared():
    for name in seal.__all__:
        assert hasattr(seal, name)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "seal"
    assert SUITE.cases
