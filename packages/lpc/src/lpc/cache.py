"""A block-granular radix prefix cache, as vLLM's automatic prefix caching.

A node is one block of ``block_size`` token ids keyed by (parent, its tokens); only full blocks are
cached. A prompt's hit length is ``block_size`` times the number of consecutive cached blocks from
the root. Blocks in use by a running request are pinned; only unpinned leaves are evictable
(evicting an interior block would strand its subtree). When a turn finishes its whole sequence
(prompt + reply) is inserted: every block on the path gets ``last_access = now`` and the
conversation joins its owners. Which leaf goes is the policy's choice (:mod:`lpc.policy`).

    >>> import numpy as np
    >>> from lpc.cache import BlockRadixCache
    >>> from lpc.policy import LRUPolicy
    >>> from lpc.trace import Request
    >>> cache = BlockRadixCache(capacity_blocks=4, block_size=2, policy=LRUPolicy())
    >>> r = Request(
    ...     0.0,
    ...     conv_id=0,
    ...     turn=0,
    ...     tokens=np.arange(6, dtype=np.int32),
    ...     user_texts=("hi",),
    ...     has_next=True,
    ... )
    >>> cache.lookup(r.tokens)
    0
    >>> cache.insert(r, now=0.0)
    3
    >>> cache.lookup(np.arange(5, dtype=np.int32))
    4
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BlockRadixCache", "Node", "PinHandle", "block_keys", "path_hashes"]


class Node:
    """One cached block. ``hkey`` is a hash of the whole prefix ending in this block."""

    __slots__ = (
        "alive",
        "block",
        "children",
        "depth",
        "heap_seq",
        "hkey",
        "insert_time",
        "key",
        "kmax",
        "kmax_owner",
        "last_access",
        "last_request",
        "owners",
        "parent",
        "pins",
    )

    def __init__(self, block: bytes, parent: Node | None, hkey: int, depth: int):
        self.block = block
        self.parent = parent
        self.children: dict[bytes, Node] = {}
        self.depth = depth
        self.hkey = hkey
        self.pins = 0
        self.alive = True
        self.last_access = -math.inf
        self.insert_time = -math.inf
        self.key: tuple = ()
        self.heap_seq = -1
        self.owners: dict[int, float] = {}
        self.kmax = -math.inf
        self.kmax_owner = -1
        self.last_request = None

    def __repr__(self) -> str:
        return f"Node(depth={self.depth}, last_access={self.last_access}, pins={self.pins})"


def block_keys(tokens: np.ndarray, block_size: int) -> list[bytes]:
    """The full blocks of ``tokens`` as byte strings (the radix tree's edge labels)."""
    arr = np.ascontiguousarray(tokens, dtype=np.int32)
    n = len(arr) // block_size
    raw = arr[: n * block_size].tobytes()
    step = 4 * block_size
    return [raw[i * step : (i + 1) * step] for i in range(n)]


def path_hashes(tokens: np.ndarray, block_size: int) -> list[int]:
    """The prefix hash of every full block of ``tokens`` (the same ``hkey`` the cache assigns)."""
    out = []
    h = 0
    for b in block_keys(tokens, block_size):
        h = hash((h, b))
        out.append(h)
    return out


class PinHandle:
    """The blocks one running request pinned (``BlockRadixCache.pin_prefix``)."""

    __slots__ = ("nodes", "released")

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.released = False


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}: expected an int >= {minimum}, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


class BlockRadixCache:
    """A radix tree of token blocks with ``capacity_blocks`` slots and a pluggable eviction policy.

    Args:
        capacity_blocks: the number of blocks the cache holds (>= 1).
        block_size: tokens per block (>= 1; vLLM's default is 16).
        policy: a :class:`lpc.policy.Policy` (default :class:`lpc.policy.LRUPolicy`). A policy
            instance belongs to one cache.
    """

    def __init__(self, capacity_blocks: int, block_size: int = 16, policy=None):
        from lpc.policy import LRUPolicy, Policy

        self.capacity = _check_int(capacity_blocks, "capacity_blocks", 1)
        self.block_size = _check_int(block_size, "block_size", 1)
        policy = LRUPolicy() if policy is None else policy
        if not isinstance(policy, Policy):
            raise TypeError(f"policy: expected an lpc.policy.Policy, got {type(policy).__name__}")
        if policy.cache is not None:
            raise ValueError("policy: this policy instance already serves another cache")
        self.policy = policy
        policy.attach(self)
        self.root = Node(b"", None, 0, 0)
        self.used = 0
        self.now = -math.inf
        self.stats = {
            "lookups": 0,
            "prompt_tokens": 0,
            "hit_tokens": 0,
            "inserted_blocks": 0,
            "evicted_blocks": 0,
            "truncated_inserts": 0,
        }

    # -- queries -----------------------------------------------------------------------------
    def _walk(self, tokens) -> list[Node]:
        node = self.root
        path = []
        for b in block_keys(tokens, self.block_size):
            node = node.children.get(b)
            if node is None:
                break
            path.append(node)
        return path

    def lookup(self, tokens) -> int:
        """Prompt tokens served from cache: ``block_size`` x the cached block prefix of ``tokens``.

        Counts into ``stats`` (``prompt_tokens`` += len(tokens), ``hit_tokens`` += the hit), so
        ``hit_ratio`` is token-weighted over prompts. Does not change any block's recency: the
        turn's ``insert`` does.
        """
        tokens = np.asarray(tokens)
        hit = len(self._walk(tokens)) * self.block_size
        self.stats["lookups"] += 1
        self.stats["prompt_tokens"] += len(tokens)
        self.stats["hit_tokens"] += hit
        return hit

    def cached_prefix_blocks(self, tokens) -> int:
        """The number of leading full blocks of ``tokens`` that are cached (no stats)."""
        return len(self._walk(np.asarray(tokens)))

    @property
    def hit_ratio(self) -> float:
        """Hit tokens over prompt tokens of every ``lookup`` so far (0 before any)."""
        p = self.stats["prompt_tokens"]
        return self.stats["hit_tokens"] / p if p else 0.0

    def nodes(self) -> list[Node]:
        """Every cached block (depth-first)."""
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def evictable(self) -> list[Node]:
        """The blocks the policy may evict now: unpinned leaves."""
        return [n for n in self.nodes() if not n.children and n.pins == 0]

    # -- pinning -----------------------------------------------------------------------------
    def pin_prefix(self, tokens) -> PinHandle:
        """Pin the cached prefix of ``tokens`` (a running request's blocks); ``unpin`` releases."""
        path = self._walk(np.asarray(tokens))
        for n in path:
            n.pins += 1
        return PinHandle(path)

    def unpin(self, handle: PinHandle) -> None:
        """Release the blocks of a ``pin_prefix`` handle (once)."""
        if not isinstance(handle, PinHandle):
            raise TypeError(f"handle: expected a PinHandle, got {type(handle).__name__}")
        if handle.released:
            raise ValueError("handle: already released")
        handle.released = True
        for n in handle.nodes:
            n.pins -= 1
            if n.pins == 0 and n.alive and not n.children:
                self.policy.push(n)

    # -- updates -----------------------------------------------------------------------------
    def _check_now(self, now) -> float:
        if isinstance(now, bool) or not isinstance(now, int | float | np.floating | np.integer):
            raise TypeError(f"now: expected a time in seconds, got {type(now).__name__}")
        now = float(now)
        if math.isnan(now):
            raise ValueError("now: expected a time in seconds, got NaN")
        if now < self.now:
            raise ValueError(f"now: time must not decrease, got {now!r} after {self.now!r}")
        self.now = now
        return now

    def insert(self, request, now: float, tokens=None) -> int:
        """Cache a finished turn: the full blocks of ``tokens`` (default prompt + reply).

        Existing blocks on the path are touched (``last_access = now``, the conversation joins
        their owners); missing ones are allocated, evicting the policy's victims when the cache is
        full. The path is pinned while it is built, so a request never evicts its own prefix. When
        nothing is evictable the insert stops early (``stats["truncated_inserts"]``).

        Returns:
            The number of blocks of the path cached after the call.
        """
        from lpc.trace import Request

        if not isinstance(request, Request):
            raise TypeError(f"request: expected an lpc.trace.Request, got {type(request).__name__}")
        now = self._check_now(now)
        seq = request.sequence if tokens is None else np.asarray(tokens)
        policy = self.policy
        policy.begin_request(request, now)
        node = self.root
        path: list[Node] = []
        try:
            for b in block_keys(seq, self.block_size):
                child = node.children.get(b)
                if child is None:
                    if self.used >= self.capacity and not self._evict_one():
                        self.stats["truncated_inserts"] += 1
                        break
                    child = Node(b, node, hash((node.hkey, b)), node.depth + 1)
                    child.insert_time = now
                    node.children[b] = child
                    self.used += 1
                    self.stats["inserted_blocks"] += 1
                child.pins += 1
                path.append(child)
                child.last_access = now
                child.last_request = request
                node = child
            policy.touch_path(path, request, now)
        finally:
            for n in path:
                n.pins -= 1
            # only the deepest block of the path can be an evictable leaf of this path
            for n in path:
                if n.pins == 0 and not n.children:
                    policy.push(n)
        return len(path)

    def _evict_one(self) -> bool:
        victim = self.policy.pop_victim()
        if victim is None:
            return False
        self._remove(victim)
        return True

    def _remove(self, node: Node) -> None:
        if node.children or node.pins:
            raise AssertionError("only unpinned leaves are evictable")  # policy bug
        parent = node.parent
        del parent.children[node.block]
        node.alive = False
        self.used -= 1
        self.stats["evicted_blocks"] += 1
        self.policy.on_evict(node)
        if parent is not self.root and not parent.children and parent.pins == 0:
            self.policy.push(parent)
