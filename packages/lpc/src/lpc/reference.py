"""Naive, readable references: the spec in code, for tests (exponential or O(n) per call).

- :func:`longest_cached_prefix`: a prompt's hit from the set of cached block paths, by brute force.
- :func:`optimal_hit_tokens`: the best total hit any eviction sequence achieves on a tiny trace
  (exhaustive search over every choice of victim, memoised on the cache state), under the same
  rules as :class:`lpc.cache.BlockRadixCache`: lookup then insert of the whole sequence, only
  unpinned leaves evictable (the path being built is pinned), an insert stops when nothing is
  evictable.

    >>> import numpy as np
    >>> from lpc.trace import Request
    >>> from lpc.reference import optimal_hit_tokens
    >>> a = Request(0.0, 0, 0, np.array([1, 2], np.int32), ("a",), True)
    >>> b = Request(1.0, 1, 0, np.array([3], np.int32), ("b",), False)
    >>> c = Request(2.0, 0, 1, np.array([1, 2, 9], np.int32), ("a", "c"), False)
    >>> optimal_hit_tokens([a, b, c], capacity_blocks=2, block_size=1)  # b evicts [1, 2]
    1
    >>> optimal_hit_tokens([a, b, c], capacity_blocks=3, block_size=1)
    2
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["longest_cached_prefix", "optimal_hit_tokens", "prefixes"]


def prefixes(tokens, block_size: int) -> list[tuple[int, ...]]:
    """The token tuple of every full-block prefix of ``tokens`` (shortest first)."""
    t = tuple(int(x) for x in np.asarray(tokens).ravel())
    n = len(t) // block_size
    return [t[: (j + 1) * block_size] for j in range(n)]


def longest_cached_prefix(tokens, cached: set[tuple[int, ...]], block_size: int) -> int:
    """Hit tokens of ``tokens``: ``block_size`` x the longest run of cached prefixes from the root."""
    hit = 0
    for p in prefixes(tokens, block_size):
        if p not in cached:
            break
        hit = len(p)
    return hit


def optimal_hit_tokens(trace, capacity_blocks: int, block_size: int = 1) -> int:
    """The maximum total hit tokens over every eviction sequence (exponential: tiny traces only)."""
    seqs = [prefixes(r.sequence, block_size) for r in trace]

    @functools.cache
    def best(i: int, j: int, state: frozenset) -> int:
        if i == len(trace):
            return 0
        if j == 0:  # lookup of request i, then its insert starts
            hit = longest_cached_prefix(trace[i].tokens, state, block_size)
            return hit + insert(i, 0, state)
        return insert(i, j, state)

    def insert(i: int, j: int, state: frozenset) -> int:
        seq = seqs[i]
        while j < len(seq) and seq[j] in state:
            j += 1
        if j == len(seq):
            return best(i + 1, 0, state)
        if len(state) < capacity_blocks:
            return best_after(i, j + 1, state | {seq[j]})
        pinned = set(seq[:j])
        leaves = [
            q
            for q in state
            if q not in pinned and not any(len(o) > len(q) and o[: len(q)] == q for o in state)
        ]
        if not leaves:  # nothing evictable: the insert stops here
            return best(i + 1, 0, state)
        return max(best_after(i, j + 1, (state - {q}) | {seq[j]}) for q in leaves)

    def best_after(i: int, j: int, state: frozenset) -> int:
        return insert(i, j, state) if j < len(seqs[i]) else best(i + 1, 0, state)

    return best(0, 0, frozenset())
