"""Public API and benchmark suite declaration."""

import qcs
from qcs.bench import SUITE


def test_public_api_is_declared_and_importable():
    assert qcs.__all__
    for name in qcs.__all__:
        assert hasattr(qcs, name), name


def test_suite_is_named_after_the_package():
    assert SUITE.name == "qcs"
    assert "projection_speed" in {
        c if isinstance(c, str) else getattr(c, "name", c) for c in SUITE.cases
    }
