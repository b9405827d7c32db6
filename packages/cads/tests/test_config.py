import pytest
from cads import Budget
from cads.config import CADSConfig

B = Budget(100, 32)


def test_probe_steps_follow_the_fraction():
    assert CADSConfig(B, outer_steps=3).probe_steps == 20
    assert CADSConfig(B, outer_steps=3, probe_fraction=1.0).probe_steps == 100
    assert CADSConfig(Budget(1, 8), outer_steps=3, probe_fraction=0.01).probe_steps == 1


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"probe_fraction": 0.0}, ValueError, "probe_fraction"),
        ({"probe_fraction": 1.5}, ValueError, "probe_fraction"),
        ({"rollouts": 1}, ValueError, "rollouts"),
        ({"outer_steps": 0}, ValueError, "outer_steps"),
        ({"penalty": -1.0}, ValueError, "penalty"),
        ({"clip_norm": 0.0}, ValueError, "clip_norm"),
        ({"outer_lr": "fast"}, TypeError, "outer_lr"),
        ({"granularity": "batch"}, ValueError, "granularity"),
        ({"budget": 100}, TypeError, "budget"),
    ],
)
def test_bad_config(kwargs, exc, name):
    args = {"budget": B, "outer_steps": 3} | kwargs
    with pytest.raises(exc, match=name):
        CADSConfig(**args)
