"""BlockRadixCache: fuzzed tree invariants after every operation, pinning, bad input."""

import numpy as np
import pytest
from lpc.cache import BlockRadixCache
from lpc.policy import BeladyPolicy, FIFOPolicy, LPCPolicy, LRUPolicy
from lpc.reference import longest_cached_prefix
from lpc.trace import Request


def _cached_prefixes(cache):
    out = set()
    stack = [(n, ()) for n in cache.root.children.values()]
    while stack:
        node, pre = stack.pop()
        toks = pre + tuple(np.frombuffer(node.block, dtype=np.int32).tolist())
        out.add(toks)
        stack.extend((c, toks) for c in node.children.values())
    return out


def _check(cache, evicted, handles, trace):
    nodes = cache.nodes()
    assert cache.used == len(nodes) <= cache.capacity
    for n in nodes:
        assert n.alive and n.parent.children[n.block] is n
    for n in evicted:  # no evicted block has cached descendants, nor is reachable
        assert not n.alive and not n.children
        assert n.parent.children.get(n.block) is not n
    for h in handles:
        for n in h.nodes:
            assert n.alive
    cached = _cached_prefixes(cache)
    for r in trace:
        hit = cache.cached_prefix_blocks(r.tokens) * cache.block_size
        assert hit == longest_cached_prefix(r.tokens, cached, cache.block_size)


@pytest.mark.parametrize("seed", range(12))
def test_fuzzed_invariants_after_every_operation(seed, make_trace):
    rng = np.random.default_rng(seed)
    trace = make_trace(
        rng, 14, n_convs=4, vocab=3, msg=(1, 4), resp=(0, 3), shared=int(rng.integers(0, 3))
    )
    bs = int(rng.integers(1, 3))
    cap = int(rng.integers(1, 9))
    policy = [
        LRUPolicy(),
        FIFOPolicy(),
        LPCPolicy(lambda r: (r.conv_id + 1) / 6, 7.0),
        BeladyPolicy(trace),
    ][seed % 4]
    cache = BlockRadixCache(cap, block_size=bs, policy=policy)
    evicted = []
    orig = policy.on_evict
    policy.on_evict = lambda n: (evicted.append(n), orig(n))
    handles = []
    for r in trace:
        cache.lookup(r.tokens)
        _check(cache, evicted, handles, trace)
        if rng.random() < 0.3:
            handles.append(cache.pin_prefix(r.tokens))
        cache.insert(r, r.time)
        _check(cache, evicted, handles, trace)
        if handles and rng.random() < 0.4:
            cache.unpin(handles.pop(int(rng.integers(len(handles)))))
            _check(cache, evicted, handles, trace)
    assert cache.stats["prompt_tokens"] == sum(len(r.tokens) for r in trace)


def test_hit_ratio_is_token_weighted_over_prompts():
    cache = BlockRadixCache(10, block_size=2)
    r = Request(0.0, 0, 0, np.arange(6, dtype=np.int32), ("a",), True)
    cache.insert(r, 0.0)
    assert cache.lookup(np.arange(5, dtype=np.int32)) == 4
    assert cache.lookup(np.array([9, 9, 9], np.int32)) == 0
    assert cache.hit_ratio == pytest.approx(4 / 8)


def test_pinned_blocks_are_never_evicted_and_full_pin_truncates_inserts():
    cache = BlockRadixCache(2, block_size=1)
    a = Request(0.0, 0, 0, np.array([1, 2], np.int32), ("a",), True)
    cache.insert(a, 0.0)
    h = cache.pin_prefix(a.tokens)
    b = Request(1.0, 1, 0, np.array([3, 4], np.int32), ("b",), True)
    assert cache.insert(b, 1.0) == 0
    assert cache.stats["truncated_inserts"] == 1
    cache.unpin(h)
    assert cache.insert(b, 2.0) == 2
    with pytest.raises(ValueError, match="handle"):
        cache.unpin(h)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"capacity_blocks": 0}, "capacity_blocks"),
        ({"capacity_blocks": 4, "block_size": 0}, "block_size"),
    ],
)
def test_bad_sizes_raise_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BlockRadixCache(**kwargs)
    with pytest.raises(TypeError, match="capacity_blocks"):
        BlockRadixCache(2.5)
    with pytest.raises(TypeError, match="policy"):
        BlockRadixCache(4, policy="lru")


def test_decreasing_time_is_refused_and_changes_nothing():
    cache = BlockRadixCache(4, block_size=1)
    cache.insert(Request(5.0, 0, 0, np.array([1], np.int32), ("a",), True), 5.0)
    before = (cache.used, dict(cache.stats))
    with pytest.raises(ValueError, match="now"):
        cache.insert(Request(4.0, 1, 0, np.array([2], np.int32), ("b",), True), 4.0)
    assert (cache.used, cache.stats) == before
    with pytest.raises(TypeError, match="request"):
        cache.insert("tokens", 6.0)


def test_a_policy_instance_serves_one_cache():
    p = LRUPolicy()
    BlockRadixCache(2, policy=p)
    with pytest.raises(ValueError, match="policy"):
        BlockRadixCache(2, policy=p)
