"""Policies: constant LPC == LRU, static key == periodic re-scoring, Belady vs others and vs search."""

import math

import numpy as np
import pytest
from lpc.cache import BlockRadixCache
from lpc.decay import continuation_prob, static_key
from lpc.policy import BeladyPolicy, FIFOPolicy, LPCPolicy, LRUPolicy, OraclePolicy
from lpc.reference import optimal_hit_tokens
from lpc.sim import run_policy
from lpc.trace import Request, make_synthetic_trace


@pytest.fixture(scope="module")
def small_trace():
    return make_synthetic_trace(60, seed=3, max_active=20, system_prompts=3)


@pytest.mark.parametrize("p", [0.3, 0.77])
@pytest.mark.parametrize("frac", [0.03, 0.1])
def test_constant_predictor_gives_exactly_the_lru_hit_sequence(small_trace, p, frac):
    from lpc.sim import distinct_blocks

    cap = max(1, int(frac * distinct_blocks(small_trace)))
    lru = run_policy(small_trace, LRUPolicy(), cap)
    lpc = run_policy(small_trace, LPCPolicy(p, tau=100.0), cap)
    np.testing.assert_array_equal(lpc, lru)
    assert lru.sum() > 0


def _shared_cache(seed):
    """A cache whose blocks have several owners (shared system prompts, shared openings)."""
    rng = np.random.default_rng(seed)
    probs = {}
    policy_s = LPCPolicy(lambda r: probs[r.conv_id], tau=30.0)
    policy_p = LPCPolicy(lambda r: probs[r.conv_id], tau=30.0, rescore="periodic", interval=10.0)
    caches = [BlockRadixCache(10_000, block_size=1, policy=pol) for pol in (policy_s, policy_p)]
    prefixes = [rng.integers(0, 50, size=3).astype(np.int32) for _ in range(4)]
    t = 0.0
    for i in range(120):
        c = int(rng.integers(0, 25))
        probs[c] = float(rng.uniform(0.02, 0.98))
        t += float(rng.exponential(2.0))
        toks = np.concatenate(
            [prefixes[c % 4], rng.integers(0, 50, size=int(rng.integers(0, 4))).astype(np.int32)]
        )
        r = Request(t, c, i, toks, ("x",), True)
        for cache in caches:
            cache.insert(r, t)
    return caches, t


def test_static_key_order_equals_periodic_rescoring_at_random_instants():
    caches, t_end = _shared_cache(0)
    static, periodic = (c.policy for c in caches)
    shared = [n for n in caches[0].nodes() if len(n.owners) > 1]
    assert len(shared) >= 4  # max-pooling is exercised
    rng = np.random.default_rng(1)
    for now in t_end + rng.uniform(0, 300, size=100):
        a = [n.hkey for n in static.ranking()]
        b = [n.hkey for n in periodic.ranking(now)]
        assert a == b


def test_static_key_is_max_over_owners_of_the_conversation_keys():
    caches, _ = _shared_cache(2)
    policy = caches[0].policy
    for node in caches[0].nodes():
        keys = [float(static_key(p, t, 30.0)) for (_, _, p, t) in node.owners.values()]
        assert node.kmax == max(keys)
        pis = [
            float(continuation_prob(p, 50.0 + 1000 - t, 30.0))
            for (_, _, p, t) in node.owners.values()
        ]
        assert policy.score(node, 1050.0) == pytest.approx(max(pis), rel=1e-12)


def test_periodic_rescoring_every_eviction_reproduces_static_hits(small_trace):
    probs = {
        (r.conv_id, r.turn): 0.05 + 0.9 * ((r.conv_id * 7 + r.turn * 3) % 11) / 10
        for r in small_trace
    }
    a = run_policy(small_trace, LPCPolicy(probs, 100.0), 150)
    b = run_policy(small_trace, LPCPolicy(probs, 100.0, rescore="periodic", interval=0.0), 150)
    np.testing.assert_array_equal(a, b)


def test_lpc_evicts_the_unlikely_conversation_and_oracle_uses_labels():
    cache = BlockRadixCache(2, block_size=1, policy=OraclePolicy(100.0))
    a = Request(0.0, 0, 0, np.array([1], np.int32), ("a",), has_next=True)
    b = Request(1.0, 1, 0, np.array([2], np.int32), ("b",), has_next=False)
    c = Request(2.0, 2, 0, np.array([3], np.int32), ("c",), has_next=True)
    for r in (a, b, c):
        cache.insert(r, r.time)
    assert cache.cached_prefix_blocks([1]) == 1 and cache.cached_prefix_blocks([2]) == 0


@pytest.mark.parametrize("seed", range(6))
def test_belady_beats_lru_fifo_and_lpc_on_random_traces(seed, make_trace):
    rng = np.random.default_rng(seed)
    trace = make_trace(rng, 60, n_convs=6, vocab=4, msg=(1, 3), resp=(0, 2))
    for cap in (3, 6, 10):
        bel = run_policy(trace, BeladyPolicy(), cap, block_size=1).sum()
        for pol in (
            LRUPolicy(),
            FIFOPolicy(),
            LPCPolicy(lambda r: 0.2 + 0.6 * (r.conv_id % 2), 10.0),
        ):
            assert bel >= run_policy(trace, pol, cap, block_size=1).sum()


@pytest.mark.parametrize("seed", range(10))
def test_belady_against_exhaustive_search_on_tiny_traces(seed, make_trace):
    rng = np.random.default_rng(100 + seed)
    trace = make_trace(rng, int(rng.integers(4, 9)), n_convs=3, vocab=3, msg=(1, 2), resp=(0, 1))
    cap = int(rng.integers(1, 5))
    best = optimal_hit_tokens(trace, cap, block_size=1)
    bel = int(run_policy(trace, BeladyPolicy(), cap, block_size=1).sum())
    lru = int(run_policy(trace, LRUPolicy(), cap, block_size=1).sum())
    assert lru <= best and bel <= best
    # MIN is not proven optimal under prefix hits: the gap is recorded (pytest -s shows it), not
    # asserted to be 0; it was 0 on all ten traces when this test was written.
    print(f"seed {seed}: exhaustive optimum {best} hit tokens, Belady {bel}, gap {best - bel}")


def test_belady_refuses_a_foreign_request():
    trace = make_synthetic_trace(3, seed=0)
    cache = BlockRadixCache(8, policy=BeladyPolicy(trace))
    stranger = Request(0.0, 99, 0, np.arange(32, dtype=np.int32), ("x",), False)
    with pytest.raises(ValueError, match="request"):
        cache.insert(stranger, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"predictor": 0.5, "tau": 0.0}, ValueError, "tau"),
        ({"predictor": 0.5, "tau": -1.0}, ValueError, "tau"),
        ({"predictor": 1.5, "tau": 1.0}, ValueError, "predictor"),
        ({"predictor": math.nan, "tau": 1.0}, ValueError, "predictor"),
        ({"predictor": 0.5, "tau": 1.0, "prior": -0.1}, ValueError, "prior"),
        ({"predictor": 0.5, "tau": 1.0, "rescore": "hourly"}, ValueError, "rescore"),
        ({"predictor": "model", "tau": 1.0}, TypeError, "predictor"),
    ],
)
def test_lpc_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        LPCPolicy(**kwargs)


def test_a_predictor_returning_a_bad_probability_is_refused():
    cache = BlockRadixCache(4, block_size=1, policy=LPCPolicy(lambda r: float("nan"), 10.0))
    with pytest.raises(ValueError, match="predictor"):
        cache.insert(Request(0.0, 0, 0, np.array([1], np.int32), ("a",), True), 0.0)
