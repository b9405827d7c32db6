"""Eviction policies for :class:`lpc.cache.BlockRadixCache`.

A policy ranks the evictable blocks (unpinned leaves) of one cache. The cache tells it when a block
becomes evictable (``push``), when a request touches a path (``begin_request``/``touch_path``) and
when a block leaves (``on_evict``); ``pop_victim`` returns the block to evict next. Heap-based
policies keep a lazy min-heap: an entry whose node was re-pushed, evicted, pinned or has grown a
child is stale and skipped.

- :class:`LRUPolicy`: oldest ``last_access`` first; ties deeper block first (vLLM).
- :class:`FIFOPolicy`: oldest insertion first; ties deeper first.
- :class:`BeladyPolicy`: the block whose next use (the earliest future request whose prompt path
  contains it) is farthest; never reused first; ties deeper first. Needs the whole trace.
- :class:`LPCPolicy`: the smallest decayed continuation probability, max-pooled over the block's
  conversations (paper §3.4-3.5), through the static key ``logit p + t_last / tau`` (``rescore=
  "static"``, O(log n)) or by re-scoring every evictable block every ``interval`` seconds of trace
  time (``rescore="periodic"``, O(n), as the authors' vLLM fork does).
- :class:`OraclePolicy`: LPC with p = the true label (1 if the conversation continues, else 0).

    >>> import numpy as np
    >>> from lpc.cache import BlockRadixCache
    >>> from lpc.policy import LPCPolicy
    >>> from lpc.trace import Request
    >>> cache = BlockRadixCache(
    ...     2, block_size=2, policy=LPCPolicy(lambda r: 0.9 if r.conv_id else 0.1, tau=100.0)
    ... )
    >>> a = Request(0.0, 0, 0, np.array([1, 2], np.int32), ("a",), has_next=False)
    >>> b = Request(1.0, 1, 0, np.array([3, 4], np.int32), ("b",), has_next=True)
    >>> cache.insert(a, 0.0), cache.insert(b, 1.0)
    (1, 1)
    >>> c = Request(2.0, 2, 0, np.array([5, 6], np.int32), ("c",), has_next=True)
    >>> cache.insert(
    ...     c, 2.0
    ... )  # evicts conversation 0's block (p = 0.1), not the older-but-likely one
    1
    >>> cache.cached_prefix_blocks([3, 4]), cache.cached_prefix_blocks([1, 2])
    (1, 0)
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Mapping

import numpy as np

from lpc.decay import check_probability, check_tau, static_key

__all__ = [
    "BeladyPolicy",
    "FIFOPolicy",
    "LPCPolicy",
    "LRUPolicy",
    "OraclePolicy",
    "Policy",
]


class Policy:
    """Base class: a lazy min-heap of evictable leaves keyed by :meth:`key`."""

    name = "policy"

    def __init__(self):
        self.cache = None
        self._heap: list = []
        self._seq = 0

    def attach(self, cache) -> None:
        self.cache = cache

    # hooks the cache calls -------------------------------------------------------------------
    def prepare(self, trace) -> None:
        """Called by :func:`lpc.sim.simulate` once with the whole trace before the run."""

    def begin_request(self, request, now: float) -> None:
        """A finished turn is about to be inserted."""

    def touch_path(self, path, request, now: float) -> None:
        """Every block of ``path`` (root first) was touched by ``request`` at ``now``."""

    def on_evict(self, node) -> None:
        """``node`` left the cache."""

    def key(self, node) -> tuple:
        raise NotImplementedError

    def push(self, node) -> None:
        """``node`` is (again) an evictable leaf, or its key changed: (re-)enter it."""
        self._seq += 1
        node.heap_seq = self._seq
        heapq.heappush(self._heap, (*self.key(node), self._seq, node))

    def pop_victim(self):
        """The evictable leaf to evict next, or None when nothing is evictable."""
        heap = self._heap
        while heap:
            entry = heapq.heappop(heap)
            node = entry[-1]
            if entry[-2] == node.heap_seq and node.alive and not node.children and node.pins == 0:
                node.heap_seq = -1
                return node
        return None

    def ranking(self, now: float | None = None) -> list:
        """Every evictable leaf in eviction order (for tests; O(n log n), changes nothing)."""
        nodes = self.cache.evictable()
        return sorted(nodes, key=lambda n: self.key(n))


class LRUPolicy(Policy):
    """Least recently used; ties (blocks of one path share ``last_access``) deeper first."""

    name = "LRU"

    def key(self, node) -> tuple:
        return (node.last_access, -node.depth)


class FIFOPolicy(Policy):
    """First in, first out (by the time a block entered the cache); ties deeper first."""

    name = "FIFO"

    def key(self, node) -> tuple:
        return (node.insert_time, -node.depth)


class BeladyPolicy(Policy):
    """Belady's MIN with knowledge of the trace: evict the block reused farthest in the future.

    A block's next use is the index of the earliest later request whose prompt's cached-prefix path
    contains it (next-use indices never decrease along a path, so MIN evicts leaves first by
    itself). Never reused = +inf. Ties: deeper first. Requests are counted by position in the trace
    handed to ``__init__`` (or :meth:`prepare`); the cache's ``insert`` must receive those very
    Request objects, in order.
    """

    name = "Belady"

    def __init__(self, trace=None, block_size: int | None = None):
        super().__init__()
        self._trace = None
        self._uses: dict[int, list[int]] = {}
        self._index: dict[int, int] = {}
        self._now_index = -1
        self._block_size = block_size
        if trace is not None:
            self._trace = list(trace)

    def attach(self, cache) -> None:
        super().attach(cache)
        if self._block_size is not None and self._block_size != cache.block_size:
            raise ValueError(
                f"block_size: the policy was built for {self._block_size}, the cache uses {cache.block_size}"
            )
        if self._trace is not None:
            self._build(self._trace, cache.block_size)

    def prepare(self, trace) -> None:
        self._trace = list(trace)
        if self.cache is not None:
            self._build(self._trace, self.cache.block_size)

    def _build(self, trace, block_size: int) -> None:
        from lpc.cache import path_hashes
        from lpc.trace import check_trace

        trace = check_trace(trace)
        uses: dict[int, list[int]] = {}
        for i, r in enumerate(trace):
            for h in path_hashes(r.tokens, block_size):
                uses.setdefault(h, []).append(i)
        self._uses = uses
        self._index = {id(r): i for i, r in enumerate(trace)}

    def begin_request(self, request, now: float) -> None:
        i = self._index.get(id(request))
        if i is None:
            raise ValueError("request: not part of the trace this BeladyPolicy was built for")
        self._now_index = i

    def touch_path(self, path, request, now: float) -> None:
        pass  # the cache re-pushes evictable blocks of the path; keys are computed in key()

    def next_use(self, node) -> float:
        """Index of the next request (after the current one) whose prompt path has ``node``."""
        lst = self._uses.get(node.hkey)
        if not lst:
            return math.inf
        j = bisect_right(lst, self._now_index)
        return float(lst[j]) if j < len(lst) else math.inf

    def key(self, node) -> tuple:
        return (-self.next_use(node), -node.depth)


def _as_prob(value, name: str) -> float:
    p = float(check_probability(value, name))
    return p


class LPCPolicy(Policy):
    """Learned prefix caching: evict the block least likely to be reused (paper §3.4-3.5).

    Each finished turn of conversation c brings a prediction ``p_c`` (probability of another user
    turn). At time t the block's score is ``max over its conversations c of pi_c(t)`` with
    ``logit pi_c(t) = logit p_c - (t - t_last_c) / tau``; the smallest score goes first, ties older
    ``last_access``, then deeper.

    Args:
        predictor: where ``p`` comes from, once per request: a :class:`lpc.predictor.Predictor`
            (or anything with ``predict_requests(requests) -> array``; batched in :meth:`prepare`),
            a mapping ``(conv_id, turn) -> p``, a callable ``request -> p``, or a constant float.
        tau: mean think time of the workload in seconds (> 0).
        prior: ``p`` for a request without a prediction (default: ``predictor.prior`` if it has
            one, else 0.5). The fork falls back to a raw timestamp here, mixing scales.
        evict_stale_first: blocks that none of their conversations' latest request touched
            ("outdated" in the fork) go before every other block.
        rescore: ``"static"`` (heap keyed by ``logit p + t_last / tau``, O(log n) per operation)
            or ``"periodic"`` (every evictable block re-scored with ``pi`` every ``interval``
            seconds of trace time, O(n), as the fork does).
        interval: the re-scoring period of ``"periodic"``, seconds (>= 0; 0 = at every eviction).
    """

    name = "LPC"

    def __init__(
        self,
        predictor,
        tau: float,
        prior: float | None = None,
        evict_stale_first: bool = True,
        rescore: str = "static",
        interval: float = 10.0,
    ):
        super().__init__()
        self.tau = check_tau(tau)
        if rescore not in ("static", "periodic"):
            raise ValueError(f"rescore: expected 'static' or 'periodic', got {rescore!r}")
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval >= 0:
            raise ValueError(f"interval: expected seconds >= 0, got {interval!r}")
        if prior is None:
            prior = getattr(predictor, "prior", 0.5)
        self.prior = _as_prob(prior, "prior")
        if isinstance(predictor, bool):
            raise TypeError("predictor: expected a Predictor, mapping, callable or float, got bool")
        if isinstance(predictor, int | float):
            _as_prob(predictor, "predictor")
        elif not (
            hasattr(predictor, "predict_requests")
            or isinstance(predictor, Mapping)
            or callable(predictor)
        ):
            raise TypeError(
                f"predictor: expected a Predictor, mapping, callable or float, got {type(predictor).__name__}"
            )
        self.predictor = predictor
        self.evict_stale_first = bool(evict_stale_first)
        self.rescore = rescore
        self.interval = float(interval)
        self._pred: dict[tuple[int, int], float] = {}
        # per conversation: (p, t_last, static key k, request serial)
        self._conv: dict[int, tuple[float, float, float, int]] = {}
        self._conv_path: dict[int, list] = {}
        self._serial = 0
        self._last_rescore = -math.inf
        self._now = -math.inf

    # -- predictions ---------------------------------------------------------------------------
    def prepare(self, trace) -> None:
        """Predict every request of ``trace`` in one batch (when the predictor is batched)."""
        if hasattr(self.predictor, "predict_requests"):
            trace = list(trace)
            p = check_probability(self.predictor.predict_requests(trace), "predictor output")
            if p.shape != (len(trace),):
                raise ValueError(f"predictor output: expected shape ({len(trace)},), got {p.shape}")
            self._pred = {(r.conv_id, r.turn): float(x) for r, x in zip(trace, p, strict=True)}

    def probability(self, request) -> float:
        """The continuation probability of ``request`` (the prior when none is available)."""
        pred = self.predictor
        key = (request.conv_id, request.turn)
        if key in self._pred:
            return self._pred[key]
        if isinstance(pred, int | float):
            return float(pred)
        if isinstance(pred, Mapping):
            p = pred.get(key)
            return self.prior if p is None else _as_prob(p, "predictor value")
        if hasattr(pred, "predict_requests"):
            p = float(np.asarray(pred.predict_requests([request])).ravel()[0])
            return _as_prob(p, "predictor output")
        p = pred(request)
        return self.prior if p is None else _as_prob(p, "predictor output")

    def static_conv_key(self, p: float, t_last: float) -> float:
        """``logit(clip(p)) + t_last / tau`` (:func:`lpc.decay.static_key`; once per request)."""
        return float(static_key(p, t_last, self.tau))

    # -- hooks ---------------------------------------------------------------------------------
    def begin_request(self, request, now: float) -> None:
        p = self.probability(request)
        self._serial += 1
        self._now = now
        self._conv[request.conv_id] = (p, now, self.static_conv_key(p, now), self._serial)

    def touch_path(self, path, request, now: float) -> None:
        cid = request.conv_id
        p, t_last, k, serial = self._conv[cid]
        entry = (serial, k, p, t_last)
        for node in path:
            node.owners[cid] = entry
            if k >= node.kmax:
                node.kmax, node.kmax_owner = k, cid
            elif node.kmax_owner == cid:  # the argmax owner's key went down: recompute
                self._recompute_kmax(node)
        old = self._conv_path.get(cid)
        self._conv_path[cid] = path
        if old and self.evict_stale_first:
            on_path = {id(n) for n in path}
            for node in old:  # blocks this conversation no longer uses may have become stale
                if node.alive and id(node) not in on_path and not node.children and node.pins == 0:
                    self.push(node)

    def _recompute_kmax(self, node) -> None:
        best, arg = -math.inf, -1
        for c, (_, k, _, _) in node.owners.items():
            if k > best or arg < 0:
                best, arg = k, c
        node.kmax, node.kmax_owner = best, arg

    def on_evict(self, node) -> None:
        node.owners = {}

    def is_stale(self, node) -> bool:
        """No conversation owning ``node`` touched it with its latest request."""
        conv = self._conv
        return all(conv[c][3] != e[0] for c, e in node.owners.items())

    def _tier(self, node) -> int:
        return 0 if self.evict_stale_first and node.owners and self.is_stale(node) else 1

    def key(self, node) -> tuple:
        return (self._tier(node), node.kmax, node.last_access, -node.depth)

    def score(self, node, now: float) -> float:
        """``max over owners of pi_c(now)`` (the periodic policy's score, paper §3.4-3.5)."""
        best = -math.inf
        tau = self.tau
        for _, _, p, t_last in node.owners.values():
            best = max(best, _decayed(p, max(now - t_last, 0.0), tau))
        return best

    def _periodic_key(self, node, now: float) -> tuple:
        return (self._tier(node), self.score(node, now), node.last_access, -node.depth)

    def push(self, node) -> None:
        if self.rescore == "static":
            super().push(node)
            return
        self._seq += 1
        node.heap_seq = self._seq
        heapq.heappush(self._heap, (*self._periodic_key(node, self._now), self._seq, node))

    def pop_victim(self):
        if self.rescore == "periodic":
            now = self.cache.now
            if now - self._last_rescore >= self.interval:
                self._rescore_all(now)
        return super().pop_victim()

    def _rescore_all(self, now: float) -> None:
        """Re-score every evictable leaf at ``now`` and rebuild the heap (O(n))."""
        self._last_rescore = now
        self._now = now
        heap = []
        for node in self.cache.evictable():
            self._seq += 1
            node.heap_seq = self._seq
            heap.append((*self._periodic_key(node, now), self._seq, node))
        heapq.heapify(heap)
        self._heap = heap

    def ranking(self, now: float | None = None) -> list:
        nodes = self.cache.evictable()
        if self.rescore == "periodic":
            now = self.cache.now if now is None else now
            return sorted(nodes, key=lambda n: self._periodic_key(n, now))
        return sorted(nodes, key=self.key)


class OraclePolicy(LPCPolicy):
    """LPC with the true label as prediction (p = 1 if the conversation continues, else 0).

    Separates predictor error from policy design: ended conversations go first (LRU among them),
    then continuing ones (LRU among them).
    """

    name = "LPC-oracle"

    def __init__(self, tau: float = 100.0, evict_stale_first: bool = True):
        super().__init__(_label, tau, prior=0.5, evict_stale_first=evict_stale_first)


def _decayed(p: float, elapsed: float, tau: float) -> float:
    """Scalar :func:`lpc.decay.continuation_prob` (same formula, no numpy overhead)."""
    if p <= 0.0 or p >= 1.0 or elapsed == 0.0:
        return p
    z = math.log(p) - math.log1p(-p) - elapsed / tau
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    ez = math.exp(z)
    return ez / (1.0 + ez)


def _label(request) -> float:
    return 1.0 if request.has_next else 0.0


PolicyFactory = Callable[[], Policy]
