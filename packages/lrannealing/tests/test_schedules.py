"""Schedules (length, endpoints, shapes, warm-up) and the schedule search."""

import numpy as np
import pytest
from lrannealing import LRAnnealingLaw, schedules
from lrannealing.search import optimize_schedule


def test_lengths_and_endpoints():
    T, peak = 1000, 3e-3
    for lrs in (
        schedules.constant(T, peak),
        schedules.cosine(T, peak),
        schedules.linear(T, peak),
        schedules.wsd(T, peak),
        schedules.multistep(T, peak),
        schedules.cyclic(T, peak, cycles=3),
    ):
        assert lrs.shape == (T + 1,) and lrs.dtype == np.float64
        assert lrs.max() == pytest.approx(peak) and lrs.min() >= 0
    assert schedules.cosine(T, peak, min_lr=1e-4)[-1] == pytest.approx(1e-4)
    assert schedules.linear(T, peak)[T // 2] == pytest.approx(peak / 2)


def test_wsd_shapes_and_multistep_factors():
    T, peak = 1000, 1.0
    for shape, mid in (("cosine", 0.5), ("linear", 0.5), ("1-sqrt", 1 - np.sqrt(0.5))):
        lrs = schedules.wsd(T, peak, decay_frac=0.2, shape=shape)
        assert np.all(lrs[:801] == peak) and lrs[-1] == 0.0
        assert lrs[900] == pytest.approx(mid)
    m = schedules.multistep(T, peak)
    assert m[799] == 1.0 and m[800] == pytest.approx(10**-0.5) and m[900] == pytest.approx(0.1)


def test_warmup_ramp_and_rewarm():
    lrs = schedules.cosine(100, 1.0, warmup=10)
    np.testing.assert_allclose(lrs[:10], np.arange(1, 11) / 10)
    assert lrs[10] == 1.0
    base = schedules.cosine(200, 1.0)
    again = schedules.rewarm(base, 120, 0.8, warmup=5)
    np.testing.assert_array_equal(again[:120], base[:120])
    assert again[124] == pytest.approx(0.8) and again.shape == base.shape
    assert again[-1] == pytest.approx(base[-1])


def test_optimize_schedule_finds_the_lowest_predicted_final_loss():
    law = LRAnnealingLaw(L0=2.0, A=0.4, C=1.5, alpha=0.45)
    best = optimize_schedule(law, 2_000, 2e-3, family="wsd")
    finals = [row["final_loss"] for row in best.candidates]
    assert best.final_loss == min(finals) and len(finals) == 20 * 3 * 3
    assert best.final_loss == pytest.approx(law.predict(best.lrs, [2_000])[0])
    cos = optimize_schedule(law, 2_000, 2e-3, family="cosine")
    assert cos.params["min_lr"] in (0.0, 2e-5, 2e-4)
