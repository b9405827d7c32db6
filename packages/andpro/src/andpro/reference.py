"""Naive float64 reference of AnDPro: the spec (and the official code's arithmetic) in loops.

Nothing here is fast; every function loops over heads, queries and chunks so that each line can be
read against the method's description:

1. window attention of the last ``w`` queries over all ``L`` keys, causal inside the window;
2. max-pooling of each query's attention row along keys (kernel 7, padding 3);
3. chunks of ``c`` candidate tokens, aligned from ``sink_tokens``; sinks and window are protected;
4. anchor ``d_i = sum over candidate chunks K of c_iK`` with ``c_iK = sum_{j in K} a_ij v_j``;
5. chunk score ``s_K = sum_i <c_iK, d_i>`` (signed, unnormalised);
6. one top-k over all heads' chunks of a layer (adaptive) or per head (uniform), filling exactly
   ``budget`` tokens per head on average.

Also an exhaustive oracle for tiny problems: the kept set minimising the (unnormalised) window
output error.
"""

from __future__ import annotations

import itertools
import math

import torch

__all__ = [
    "reference_andpro_chunk_scores",
    "reference_attention_chunk_scores",
    "reference_chunks",
    "reference_oracle_keep",
    "reference_pool",
    "reference_select",
    "reference_window_attention",
]


def reference_window_attention(
    queries: torch.Tensor, keys: torch.Tensor, scaling: float | None = None
) -> torch.Tensor:
    """``[B, H_q, w, L]`` float64 softmax of the window queries over the keys (loops over heads/queries)."""
    b, hq, w, d = queries.shape
    hkv, length = keys.shape[1], keys.shape[2]
    groups = hq // hkv
    scaling = 1.0 / math.sqrt(d) if scaling is None else scaling
    out = torch.zeros(b, hq, w, length, dtype=torch.float64)
    for bi in range(b):
        for h in range(hq):
            k = keys[bi, h // groups].double()
            for i in range(w):
                visible = length - w + i + 1
                logits = (k[:visible] @ queries[bi, h, i].double()) * scaling
                out[bi, h, i, :visible] = torch.softmax(logits, dim=0)
    return out


def reference_pool(row: torch.Tensor, kernel_size: int, mode: str = "max") -> torch.Tensor:
    """Pool a 1-D row: out[j] = max / mean of row[j - k//2 : j + k//2 + 1] (zero-padded for mean)."""
    half = kernel_size // 2
    n = row.shape[0]
    out = torch.empty_like(row)
    for j in range(n):
        lo, hi = max(0, j - half), min(n, j + half + 1)
        out[j] = row[lo:hi].max() if mode == "max" else row[lo:hi].sum() / kernel_size
    return out


def reference_chunks(
    length: int, sink_tokens: int, window: int, chunk_size: int
) -> list[list[int]]:
    """Candidate chunks: positions ``sink_tokens .. L - window - 1`` cut every ``chunk_size``."""
    cand = list(range(sink_tokens, length - window))
    return [cand[i : i + chunk_size] for i in range(0, len(cand), chunk_size)]


def _pooled(queries, keys, kernel_size, mode, scaling):
    attn = reference_window_attention(queries, keys, scaling)
    b, hq, w, _ = attn.shape
    for bi in range(b):
        for h in range(hq):
            for i in range(w):
                attn[bi, h, i] = reference_pool(attn[bi, h, i], kernel_size, mode)
    return attn


def reference_andpro_chunk_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    sink_tokens: int = 4,
    window: int | None = None,
    chunk_size: int = 4,
    kernel_size: int = 7,
    pooling: str = "max",
    scaling: float | None = None,
) -> tuple[torch.Tensor, list[list[int]]]:
    """Per-query-head AnDPro chunk scores ``[B, H_q, n_chunks]`` (float64) and the chunks.

    ``window`` defaults to the number of queries ``w``.
    """
    b, hq, w, d = queries.shape
    length = keys.shape[2]
    groups = hq // keys.shape[1]
    window = w if window is None else window
    a = _pooled(queries, keys, kernel_size, pooling, scaling)
    chunks = reference_chunks(length, sink_tokens, window, chunk_size)
    scores = torch.zeros(b, hq, len(chunks), dtype=torch.float64)
    for bi in range(b):
        for h in range(hq):
            v = values[bi, h // groups].double()
            for i in range(w):
                c = [
                    sum(a[bi, h, i, j] * v[j] for j in chunk) for chunk in chunks
                ]  # c_iK, each [d]
                anchor = sum(c) if c else torch.zeros(d, dtype=torch.float64)  # d_i
                for k, c_ik in enumerate(c):
                    scores[bi, h, k] += torch.dot(c_ik, anchor)
    return scores, chunks


def reference_attention_chunk_scores(
    queries,
    keys,
    *,
    sink_tokens=4,
    window=None,
    chunk_size=4,
    kernel_size=7,
    pooling="max",
    scaling=None,
) -> tuple[torch.Tensor, list[list[int]]]:
    """The attention-only ablation's chunk scores ``sum_i sum_{j in K} a_ij``: ``[B, H_q, n_chunks]``."""
    b, hq, w, _ = queries.shape
    window = w if window is None else window
    a = _pooled(queries, keys, kernel_size, pooling, scaling)
    chunks = reference_chunks(keys.shape[2], sink_tokens, window, chunk_size)
    scores = torch.zeros(b, hq, len(chunks), dtype=torch.float64)
    for k, chunk in enumerate(chunks):
        scores[..., k] = a[..., chunk].sum(dim=(-1, -2))
    return scores, chunks


def reference_select(
    token_scores: torch.Tensor,
    budget: int,
    *,
    sink_tokens: int,
    window: int,
    chunk_size: int,
    head_budget: str = "adaptive",
) -> torch.Tensor:
    """Keep mask ``[B, H, L]`` from token scores ``[B, H, L]`` by the package's selection rule.

    Chunk score = sum of its tokens' scores; chunks are taken in descending score order (ties by
    head then position) while they fit in ``H * (budget - sink_tokens - window)`` tokens (adaptive)
    or ``budget - sink_tokens - window`` per head (uniform); then the best ``r`` tokens of the next
    chunk fill the remainder.
    """
    b, h, length = token_scores.shape
    chunks = reference_chunks(length, sink_tokens, window, chunk_size)
    keep = torch.zeros(b, h, length, dtype=torch.bool)
    keep[..., :sink_tokens] = True
    keep[..., length - window :] = True
    per_head = budget - sink_tokens - window
    groups = (
        [[(hi, k) for hi in range(h) for k in range(len(chunks))]]
        if head_budget == "adaptive"
        else [[(hi, k) for k in range(len(chunks))] for hi in range(h)]
    )
    for bi in range(b):
        for items in groups:
            remaining = per_head * (h if head_budget == "adaptive" else 1)
            score = {
                it: sum(token_scores[bi, it[0], j].item() for j in chunks[it[1]]) for it in items
            }
            order = sorted(items, key=lambda it: (-score[it], it))
            for hi, k in order:
                if remaining == 0:
                    break
                chunk = chunks[k]
                if len(chunk) <= remaining:
                    keep[bi, hi, chunk] = True
                    remaining -= len(chunk)
                else:
                    best = sorted(chunk, key=lambda j: (-token_scores[bi, hi, j].item(), j))[
                        :remaining
                    ]
                    keep[bi, hi, best] = True
                    remaining = 0
    return keep


def reference_oracle_keep(
    attention: torch.Tensor, values: torch.Tensor, candidates: list[int], num_keep: int
) -> tuple[tuple[int, ...], float]:
    """Exhaustive oracle for one head: the ``num_keep`` candidates minimising the unnormalised
    window output error ``sum_i ||sum_{j in D \\ S} a_ij v_j||^2`` (what eviction loses).

    Args:
        attention: ``[w, L]`` (pooled or raw) attention of one head.
        values: ``[L, d]``.
        candidates: evictable positions.
        num_keep: how many candidates to keep.

    Returns:
        (kept positions, their error).
    """
    a, v = attention.double(), values.double()
    best, best_err = (), math.inf
    for kept in itertools.combinations(candidates, num_keep):
        dropped = [j for j in candidates if j not in kept]
        lost = (
            a[:, dropped] @ v[dropped]
            if dropped
            else torch.zeros(a.shape[0], v.shape[1], dtype=torch.float64)
        )
        err = float((lost**2).sum())
        if err < best_err:
            best, best_err = kept, err
    return best, best_err
