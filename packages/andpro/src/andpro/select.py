"""Budgeted selection: chunked top-k over heads (adaptive) or per head (uniform).

Given token scores ``[B, H, L]`` (higher = keep), the first ``sink_tokens`` and last ``window``
tokens are always kept. The candidates in between are cut into chunks of ``chunk_size`` aligned
from ``sink_tokens`` (the last chunk may be short). A chunk's score is the sum of its tokens'
scores. Chunks are taken in descending score order while they fit into the remaining budget; the
leftover ``r < chunk_size`` tokens are the best ``r`` tokens of the next chunk, so exactly
``budget`` tokens per head are kept on average (``"adaptive"``: ``H * budget`` per layer and batch
element, one top-k across heads, no floor) or exactly ``budget`` per head (``"uniform"``). Ties go
to the lower head, then the lower position.
"""

from __future__ import annotations

import torch

__all__ = ["HEAD_BUDGETS", "resolve_budget", "select_keep"]

HEAD_BUDGETS = ("adaptive", "uniform")


def resolve_budget(budget: int | float, length: int, sink_tokens: int, window: int) -> int:
    """The per-head token budget for a prompt of ``length`` tokens.

    An int is tokens per head (sinks and window included); a float in (0, 1] is ``floor(budget * L)``.

    Raises:
        ValueError: the budget exceeds the context, or is below ``sink_tokens + window``.
    """
    tokens = int(budget * length) if isinstance(budget, float) else int(budget)
    if tokens > length:
        raise ValueError(
            f"budget: {budget!r} ({tokens} tokens) is larger than the context of {length} tokens"
        )
    if tokens < sink_tokens + window:
        raise ValueError(
            f"budget: {budget!r} ({tokens} tokens for a context of {length}) is below "
            f"sink_tokens + window = {sink_tokens + window}"
        )
    return tokens


def _check(
    scores: torch.Tensor,
    budget: int,
    sink_tokens: int,
    window: int,
    chunk_size: int,
    head_budget: str,
) -> None:
    if not isinstance(scores, torch.Tensor) or scores.dim() != 3:
        raise ValueError(
            f"scores: expected a [B, H, L] tensor, got {getattr(scores, 'shape', type(scores))}"
        )
    for name, val, low in (
        ("sink_tokens", sink_tokens, 0),
        ("window", window, 1),
        ("chunk_size", chunk_size, 1),
    ):
        if not isinstance(val, int) or isinstance(val, bool) or val < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {val!r}")
    if head_budget not in HEAD_BUDGETS:
        raise ValueError(f"head_budget: expected one of {HEAD_BUDGETS}, got {head_budget!r}")
    length = scores.shape[-1]
    if not isinstance(budget, int) or budget < sink_tokens + window or budget > length:
        raise ValueError(
            f"budget: expected an int in [sink_tokens + window, L] = [{sink_tokens + window}, {length}], got {budget!r}"
        )


def select_keep(
    scores: torch.Tensor,
    budget: int,
    *,
    sink_tokens: int = 4,
    window: int = 32,
    chunk_size: int = 4,
    head_budget: str = "adaptive",
) -> torch.Tensor:
    """Which tokens each head keeps.

    Args:
        scores: ``[B, H, L]`` token scores, higher = keep (any float dtype).
        budget: tokens kept per head (on average for ``"adaptive"``), sinks and window included,
            ``sink_tokens + window <= budget <= L``.
        sink_tokens: leading tokens always kept.
        window: trailing tokens always kept.
        chunk_size: candidates are selected in chunks of this many tokens.
        head_budget: ``"adaptive"`` (one top-k across the heads) or ``"uniform"`` (per head).

    Returns:
        ``[B, H, L]`` bool keep mask with ``keep.sum((1, 2)) == H * budget`` (adaptive) or
        ``keep.sum(2) == budget`` (uniform).

    Example:
        >>> keep = select_keep(torch.randn(1, 2, 100), 50, sink_tokens=4, window=8, chunk_size=4)
        >>> int(keep.sum())
        100
    """
    _check(scores, budget, sink_tokens, window, chunk_size, head_budget)
    b, h, length = scores.shape
    device = scores.device
    keep = torch.zeros(b, h, length, dtype=torch.bool, device=device)
    keep[..., :sink_tokens] = True
    keep[..., length - window :] = True
    n_cand = length - sink_tokens - window
    per_head = budget - sink_tokens - window
    if n_cand == 0 or per_head == 0:
        return keep
    if per_head == n_cand:
        keep[..., sink_tokens : length - window] = True
        return keep

    s = scores[..., sink_tokens : length - window].to(
        torch.float64 if scores.dtype == torch.float64 else torch.float32
    )
    n_chunks = -(-n_cand // chunk_size)
    pad = n_chunks * chunk_size - n_cand
    padded = torch.nn.functional.pad(s, (0, pad))
    chunk_scores = padded.view(b, h, n_chunks, chunk_size).sum(-1)  # [B, H, C]
    sizes = torch.full((n_chunks,), chunk_size, device=device, dtype=torch.long)
    sizes[-1] = chunk_size - pad

    if head_budget == "adaptive":
        items = chunk_scores.reshape(b, h * n_chunks)  # item = head * C + chunk
        item_sizes = sizes.repeat(h)
        quota = per_head * h
    else:
        items = chunk_scores.reshape(b * h, n_chunks)
        item_sizes = sizes
        quota = per_head
    g, n_items = items.shape
    order = torch.sort(items, dim=-1, descending=True, stable=True).indices  # [G, I]
    cum = item_sizes[order].cumsum(-1)
    taken_sorted = cum <= quota
    n_full = taken_sorted.sum(-1)  # [G]
    used = torch.where(
        n_full > 0, cum.gather(-1, (n_full - 1).clamp_min(0)[:, None]).squeeze(-1), 0
    )
    remainder = quota - used  # [G], < size of the next chunk
    taken = torch.zeros(g, n_items, dtype=torch.bool, device=device)
    taken.scatter_(-1, order, taken_sorted)

    # Expand item choices to tokens: token t of candidate row belongs to chunk t // chunk_size.
    chunk_of = torch.arange(n_cand, device=device) // chunk_size
    tok_taken = taken.view(b, h, n_chunks)[..., chunk_of]  # [B, H, n_cand]

    # Partial chunk: the best `remainder` tokens of the first chunk that did not fit.
    has_partial = (remainder > 0) & (n_full < n_items)
    if bool(has_partial.any()):
        nxt = order.gather(-1, n_full.clamp_max(n_items - 1)[:, None]).squeeze(-1)  # [G] item id
        if head_budget == "adaptive":
            p_head, p_chunk = nxt // n_chunks, nxt % n_chunks
            in_chunk = chunk_of[None, :] == p_chunk[:, None]  # [B, n_cand]
            tok = s[torch.arange(b, device=device), p_head]  # [B, n_cand]
        else:
            p_chunk = nxt
            in_chunk = chunk_of[None, :] == p_chunk[:, None]  # [B*H, n_cand]
            tok = s.reshape(b * h, n_cand)
        # Rank the partial chunk's tokens by score (ties: lower position) and keep the first r.
        by_score = torch.sort(tok, dim=-1, descending=True, stable=True).indices
        in_sorted = in_chunk.gather(-1, by_score)
        rank_sorted = in_sorted.long().cumsum(-1) - 1
        pick_sorted = in_sorted & (rank_sorted < remainder[:, None]) & has_partial[:, None]
        partial = torch.zeros_like(in_chunk).scatter_(-1, by_score, pick_sorted)
        if head_budget == "adaptive":
            head_onehot = torch.arange(h, device=device)[None, :, None] == p_head[:, None, None]
            tok_taken = tok_taken | (head_onehot & partial[:, None, :])
        else:
            tok_taken = tok_taken | partial.view(b, h, n_cand)
    keep[..., sink_tokens : length - window] = tok_taken
    return keep
