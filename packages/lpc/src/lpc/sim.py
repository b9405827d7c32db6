"""Trace-driven simulation of a prefix cache under several eviction policies.

Each request, in arrival order, first looks its prompt up (the hit is the cached block prefix,
token-weighted over prompt tokens, as vLLM's ``gpu_prefix_cache_hit_rate``) and then, its turn
finished, inserts its whole sequence (prompt + reply) at its arrival time: service is instant,
so no two requests of the trace run at once and nothing but the path being built is pinned.

libCacheSim's policies (S3-FIFO, SIEVE, ARC, ...) are flat caches of unit-size objects. The adapter
(:class:`LibCacheSimPolicy`) feeds each request's path blocks as objects (id = prefix hash) and cuts
the hit at the first missing block (prefix semantics). Blocks are fed deepest first, so a
recency-based policy keeps a path's root longest (what the radix tree's leaf-first rule does).

    >>> from lpc.trace import make_synthetic_trace
    >>> from lpc.policy import LRUPolicy, FIFOPolicy
    >>> from lpc.sim import simulate
    >>> trace = make_synthetic_trace(30, seed=0)
    >>> res = simulate(trace, {"LRU": LRUPolicy, "FIFO": FIFOPolicy}, sizes=[20, 200])
    >>> sorted(res.hit_ratio), bool(res.hit_ratio["LRU"][1] >= res.hit_ratio["LRU"][0])
    (['FIFO', 'LRU'], True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import multiprocessing
from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = [
    "LIBCACHESIM_POLICIES",
    "LibCacheSimPolicy",
    "SimResult",
    "distinct_blocks",
    "gc_paused",
    "libcachesim_available",
    "run_policy",
    "simulate",
    "size_at_hit_ratio",
    "size_reduction",
]

#: The libCacheSim algorithms the suite runs beside ours (what users try instead of LRU).
LIBCACHESIM_POLICIES = ("S3FIFO", "Sieve", "ARC", "LRU")


def libcachesim_available() -> bool:
    """Whether the optional peer ``libcachesim`` (``pip install lpc[peers]``) imports."""
    try:
        import libcachesim  # noqa: F401
    except ImportError:
        return False
    return True


class LibCacheSimPolicy:
    """A libCacheSim algorithm run on the trace's blocks with prefix-hit semantics.

    Args:
        algorithm: a class name of ``libcachesim`` (``"S3FIFO"``, ``"Sieve"``, ``"ARC"``, ``"LRU"``...).
        **kwargs: passed to the libCacheSim constructor.
    """

    def __init__(self, algorithm: str, **kwargs):
        if not isinstance(algorithm, str):
            raise TypeError(
                f"algorithm: expected a libcachesim class name, got {type(algorithm).__name__}"
            )
        self.algorithm = algorithm
        self.kwargs = kwargs
        self.name = f"libcachesim-{algorithm}"

    def run(self, trace, capacity_blocks: int, block_size: int = 16) -> np.ndarray:
        """Hit tokens of every request (prompt lookups), in trace order."""
        try:
            import libcachesim as lcs
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                "libcachesim is not installed: `pip install lpc[peers]` (Linux x86-64 wheels only)"
            ) from err
        from lpc.cache import path_hashes

        cls = getattr(lcs, self.algorithm, None)
        if cls is None:
            raise ValueError(f"algorithm: libcachesim has no policy {self.algorithm!r}")
        cache = cls(cache_size=int(capacity_blocks), **self.kwargs)
        req = lcs.Request()
        req.obj_size = 1
        mask = (1 << 63) - 1
        hits = np.zeros(len(trace), dtype=np.int64)
        vtime = 0
        for i, r in enumerate(trace):
            prompt = path_hashes(r.tokens, block_size)
            n = 0
            for h in prompt:
                req.obj_id = h & mask
                if cache.find(req, False) is None:
                    break
                n += 1
            hits[i] = n * block_size
            for h in reversed(path_hashes(r.sequence, block_size)):
                vtime += 1
                req.obj_id = h & mask
                req.clock_time = vtime
                cache.get(req)
        return hits


@dataclasses.dataclass
class SimResult:
    """Hit ratios of every policy at every size.

    Attributes:
        sizes: cache capacities in blocks.
        hit_ratio: policy name -> float array (len(sizes)); token-weighted over prompt tokens.
        hits: policy name -> list (per size) of int arrays: hit tokens of every request.
        prompt_tokens: total prompt tokens of the trace.
        skipped: policy name -> reason, for policies that could not run (e.g. a missing peer).
    """

    sizes: np.ndarray
    hit_ratio: dict[str, np.ndarray]
    hits: dict[str, list[np.ndarray]]
    prompt_tokens: int
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector (re-enabled on exit if it was on).

    A cache of 1e5 nodes (parent <-> children references) makes every full collection walk them
    all; the simulator allocates much and frees by reference counting alone, so collections only
    cost time (they made LPC's bookkeeping look 3x slower than it is).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_policy(trace, policy, capacity_blocks: int, block_size: int = 16) -> np.ndarray:
    """Hit tokens of every request of ``trace`` under one fresh ``policy`` instance."""
    from lpc.cache import BlockRadixCache

    if isinstance(policy, LibCacheSimPolicy):
        return policy.run(trace, capacity_blocks, block_size)
    cache = BlockRadixCache(capacity_blocks, block_size=block_size, policy=policy)
    policy.prepare(trace)
    hits = np.zeros(len(trace), dtype=np.int64)
    with gc_paused():
        for i, r in enumerate(trace):
            hits[i] = cache.lookup(r.tokens)
            cache.insert(r, r.time)
    return hits


def simulate(
    trace,
    policies: Mapping[str, Callable[[], object]],
    sizes: Sequence[int],
    block_size: int = 16,
    progress: bool = False,
    workers: int = 1,
) -> SimResult:
    """Run every policy at every cache size on ``trace``.

    Args:
        trace: requests sorted by time (:func:`lpc.trace.check_trace`).
        policies: name -> a zero-argument factory returning a fresh policy (a
            :class:`lpc.policy.Policy` or a :class:`LibCacheSimPolicy`); a factory raising
            ImportError is recorded in ``skipped``.
        sizes: capacities in blocks (each >= 1).
        block_size: tokens per block.
        progress: show a progress bar (``neurips25_core.progress``).
        workers: processes running (policy, size) jobs at once. Every job is independent and
            deterministic, so the result is identical for any value; ``workers > 1`` forks
            (POSIX only; elsewhere it runs serially), so the factories may be lambdas.
    """
    from lpc.trace import check_trace

    trace = check_trace(trace)
    if not isinstance(policies, Mapping) or not policies:
        raise TypeError("policies: expected a non-empty mapping name -> policy factory")
    sizes = [int(s) for s in sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes: expected capacities >= 1, got {sizes!r}")
    prompt_tokens = int(sum(len(r.tokens) for r in trace))
    result = SimResult(np.array(sizes), {}, {}, prompt_tokens)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
    jobs = [(name, s) for name in policies for s in sizes]
    bar = None
    if progress:
        from neurips25_core.progress import progress_bar

        bar = progress_bar(total=len(jobs), desc="simulate")
    done: dict[tuple[str, int], np.ndarray | str] = {}
    global _FORKED_JOB
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        _FORKED_JOB = (trace, policies, block_size)
        try:
            with multiprocessing.get_context("fork").Pool(min(workers, len(jobs))) as pool:
                for key, out in pool.imap_unordered(_run_job, jobs):
                    done[key] = out
                    if bar is not None:
                        bar.update(1)
        finally:
            _FORKED_JOB = None
    else:
        for name, s in jobs:
            done[(name, s)] = _run_one(trace, policies[name], s, block_size)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    for name in policies:
        outs = [done[(name, s)] for s in sizes]
        errors = [o for o in outs if isinstance(o, str)]
        if errors:
            result.skipped[name] = errors[0]
            continue
        result.hits[name] = outs
        result.hit_ratio[name] = np.array([h.sum() / max(prompt_tokens, 1) for h in outs])
    return result


#: (trace, policies, block_size) of the simulation being forked (read by :func:`_run_job`).
_FORKED_JOB = None


def _run_one(trace, factory, capacity: int, block_size: int) -> np.ndarray | str:
    """One (policy, size) job: its hit array, or the ImportError's message."""
    try:
        return run_policy(trace, factory(), capacity, block_size)
    except ImportError as err:
        return str(err)


def _run_job(job):
    name, capacity = job
    trace, policies, block_size = _FORKED_JOB
    return job, _run_one(trace, policies[name], capacity, block_size)


def distinct_blocks(trace, block_size: int = 16) -> int:
    """The number of distinct full blocks the trace's sequences (prompt + reply) touch."""
    from lpc.cache import path_hashes

    seen: set[int] = set()
    for r in trace:
        seen.update(path_hashes(r.sequence, block_size))
    return len(seen)


def size_at_hit_ratio(sizes, hit_ratios, h: float) -> float:
    """The cache size at which the hit-ratio curve first reaches ``h`` (linear interpolation).

    NaN when the curve never reaches ``h``; ``sizes[0]`` when it already does at the smallest size
    (the true size may be smaller: the caller should sweep lower).
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    hr = np.asarray(hit_ratios, dtype=np.float64)
    if sizes.shape != hr.shape or sizes.ndim != 1:
        raise ValueError(f"hit_ratios: expected the shape of sizes {sizes.shape}, got {hr.shape}")
    if not 0.0 <= h <= 1.0:
        raise ValueError(f"h: expected a hit ratio in [0, 1], got {h!r}")
    order = np.argsort(sizes)
    sizes, hr = sizes[order], hr[order]
    if hr[0] >= h:
        return float(sizes[0])
    for i in range(1, len(sizes)):
        if hr[i] >= h:
            f = (h - hr[i - 1]) / (hr[i] - hr[i - 1])
            return float(sizes[i - 1] + f * (sizes[i] - sizes[i - 1]))
    return math.nan


def size_reduction(sizes, baseline_hit_ratios, method_hit_ratios, h: float) -> float:
    """``1 - size_method / size_baseline`` at equal hit ratio ``h`` (NaN where either misses h)."""
    base = size_at_hit_ratio(sizes, baseline_hit_ratios, h)
    ours = size_at_hit_ratio(sizes, method_hit_ratios, h)
    if math.isnan(base) or math.isnan(ours) or base == 0:
        return math.nan
    return 1.0 - ours / base
