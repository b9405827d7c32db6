"""Simulation: the libCacheSim adapter against our LRU, size at equal hit ratio, bad input."""

import math

import numpy as np
import pytest
from lpc.policy import FIFOPolicy, LRUPolicy
from lpc.sim import (
    LibCacheSimPolicy,
    distinct_blocks,
    libcachesim_available,
    simulate,
    size_at_hit_ratio,
    size_reduction,
)
from lpc.trace import make_synthetic_trace


@pytest.fixture(scope="module")
def trace():
    return make_synthetic_trace(120, seed=4, max_active=40)


@pytest.mark.skipif(
    not libcachesim_available(), reason="libcachesim (the `peers` extra) is not installed"
)
def test_libcachesim_lru_is_within_one_point_of_ours(trace):
    n = distinct_blocks(trace)
    sizes = [int(n * f) for f in (0.03, 0.1, 0.3)]
    res = simulate(
        trace,
        {
            "ours": LRUPolicy,
            "lcs": lambda: LibCacheSimPolicy("LRU"),
            "s3": lambda: LibCacheSimPolicy("S3FIFO"),
        },
        sizes,
    )
    assert np.max(np.abs(res.hit_ratio["ours"] - res.hit_ratio["lcs"])) <= 0.01
    assert (res.hit_ratio["s3"] > 0).all()


def test_simulate_curves_are_monotone_and_bounded(trace):
    n = distinct_blocks(trace)
    res = simulate(trace, {"LRU": LRUPolicy, "FIFO": FIFOPolicy}, [n // 50, n // 10, n])
    for curve in res.hit_ratio.values():
        assert (np.diff(curve) >= 0).all() and curve[0] >= 0 and curve[-1] <= 1
    assert res.hit_ratio["LRU"][-1] == res.hit_ratio["FIFO"][-1]  # everything fits: no eviction


def test_two_workers_give_the_serial_result_exactly(trace):
    from lpc.policy import BeladyPolicy, OraclePolicy

    n = distinct_blocks(trace)
    policies = {
        "LRU": LRUPolicy,
        "FIFO": FIFOPolicy,
        "oracle": lambda: OraclePolicy(3.0),  # a lambda: fine for the forked workers
        "Belady": BeladyPolicy,
    }

    def missing():
        raise ImportError("not installed")

    policies["missing"] = missing
    sizes = [n // 30, n // 8, n // 3]
    serial = simulate(trace, policies, sizes)
    forked = simulate(trace, policies, sizes, workers=2)
    assert serial.skipped == forked.skipped == {"missing": "not installed"}
    assert list(forked.hits) == list(serial.hits) == ["LRU", "FIFO", "oracle", "Belady"]
    for name in serial.hits:
        for a, b in zip(serial.hits[name], forked.hits[name], strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(serial.hit_ratio[name], forked.hit_ratio[name])


def test_size_at_hit_ratio_interpolates():
    sizes, hr = [10, 20, 40], [0.1, 0.3, 0.5]
    assert size_at_hit_ratio(sizes, hr, 0.2) == pytest.approx(15.0)
    assert size_at_hit_ratio(sizes, hr, 0.4) == pytest.approx(30.0)
    assert math.isnan(size_at_hit_ratio(sizes, hr, 0.6))
    assert size_reduction(sizes, hr, [0.2, 0.4, 0.5], 0.3) == pytest.approx(1 - 15 / 20)
    with pytest.raises(ValueError, match="h"):
        size_at_hit_ratio(sizes, hr, 1.5)
    with pytest.raises(ValueError, match="hit_ratios"):
        size_at_hit_ratio(sizes, hr[:2], 0.2)


def test_simulate_bad_input(trace):
    with pytest.raises(ValueError, match="sizes"):
        simulate(trace, {"LRU": LRUPolicy}, [0])
    with pytest.raises(TypeError, match="policies"):
        simulate(trace, {}, [4])
    with pytest.raises(ValueError, match="time"):
        simulate(list(reversed(trace)), {"LRU": LRUPolicy}, [4])
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            simulate(trace, {"LRU": LRUPolicy}, [4], workers=bad)
    if libcachesim_available():
        with pytest.raises(ValueError, match="algorithm"):
            simulate(trace[:3], {"x": lambda: LibCacheSimPolicy("NoSuchPolicy")}, [4])
