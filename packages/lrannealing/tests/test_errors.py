"""Bad input raises ValueError/TypeError naming the argument."""

import numpy as np
import pytest
from lrannealing import Curve, LRAnnealingLaw, areas, fit, schedules
from lrannealing.search import optimize_schedule

STEPS = np.arange(10, 101, 10)
LRS = schedules.cosine(100, 1e-3)


def _curve(**kw):
    args = dict(steps=STEPS, loss=np.linspace(3, 2, STEPS.size), lrs=LRS)
    args.update(kw)
    return Curve(**args)


def test_negative_lrs():
    bad = LRS.copy()
    bad[5] = -1e-4
    with pytest.raises(ValueError, match="lrs"):
        areas(bad)
    with pytest.raises(ValueError, match="lrs"):
        _curve(lrs=bad)
    with pytest.raises(ValueError, match="lrs"):
        LRAnnealingLaw(2.0, 0.5, 0.1, 0.5).predict(bad)


def test_lrs_shorter_than_the_steps():
    with pytest.raises(ValueError, match="lrs"):
        _curve(lrs=LRS[:100])  # max(steps) = 100 needs 101 LRs
    with pytest.raises(ValueError, match="lrs"):
        LRAnnealingLaw(2.0, 0.5, 0.1, 0.5).predict(LRS[:50], steps=STEPS)


@pytest.mark.parametrize("value", [np.nan, np.inf, 0.0, -1.0])
def test_non_finite_or_non_positive_loss(value):
    loss = np.linspace(3, 2, STEPS.size)
    loss[3] = value
    with pytest.raises(ValueError, match="loss"):
        _curve(loss=loss)


@pytest.mark.parametrize("decay", [-0.1, 1.0, 1.5, np.nan])
def test_decay_outside_unit_interval(decay):
    with pytest.raises(ValueError, match="decay"):
        areas(LRS, decay)
    with pytest.raises(ValueError, match="decay"):
        LRAnnealingLaw(2.0, 0.5, 0.1, 0.5, decay=decay)
    with pytest.raises(ValueError, match="decay"):
        fit(_curve(), decay=decay)
    with pytest.raises((ValueError, TypeError), match="decay"):
        fit(_curve(), decay="grids")


def test_fewer_than_five_fit_points():
    c = Curve(STEPS[:4], np.linspace(3, 2, 4), LRS)
    with pytest.raises(ValueError, match="5 fit points"):
        fit(c)
    with pytest.raises(ValueError, match="5 fit points"):
        fit([c.after(30), Curve(STEPS[:1], [3.0], LRS)])


def test_unknown_warmup_or_shape():
    with pytest.raises(ValueError, match="warmup"):
        areas(LRS, warmup_steps=5, warmup="ramp")
    with pytest.raises(ValueError, match="warmup"):
        LRAnnealingLaw(2.0, 0.5, 0.1, 0.5, warmup="linear")
    with pytest.raises(ValueError, match="shape"):
        schedules.wsd(100, 1e-3, shape="sqrt")
    with pytest.raises(ValueError, match="shapes"):
        optimize_schedule(LRAnnealingLaw(2.0, 0.5, 0.1, 0.5), 100, 1e-3, shapes=("exp",))


def test_other_arguments():
    with pytest.raises(TypeError, match="curves"):
        fit([1, 2, 3])
    with pytest.raises(ValueError, match="steps"):
        _curve(steps=STEPS[::-1])
    with pytest.raises(ValueError, match="warmup_steps"):
        areas(LRS, warmup_steps=101)
    with pytest.raises(ValueError, match="gradient"):
        fit(_curve(), gradient="exact")
    with pytest.raises(ValueError, match="init_grid"):
        fit(_curve(), init_grid={"L0": (1.0,)})
    with pytest.raises(ValueError, match="min_lr"):
        schedules.cosine(100, 1e-3, min_lr=1e-2)
    with pytest.raises(ValueError, match="warmup"):
        schedules.cosine(100, 1e-3, warmup=100)
    with pytest.raises(TypeError, match="lrs"):
        areas("0.1,0.2")
    with pytest.raises(ValueError, match="family"):
        optimize_schedule(LRAnnealingLaw(2.0, 0.5, 0.1, 0.5), 100, 1e-3, family="poly")


def test_the_input_arrays_are_not_modified():
    lrs = schedules.wsd(100, 1e-3, warmup=10)
    before = lrs.copy()
    areas(lrs, warmup_steps=10)
    c = _curve(lrs=lrs)
    fit([c], init_grid={"L0": (2.1,), "A": (1.0,), "C": (1.0,), "alpha": (0.4,)})
    np.testing.assert_array_equal(lrs, before)
