"""Tensor-level scoring: window attention, pooling, the AnDPro projection score and its ablations.

Everything here works on plain tensors (no model, no cache) so it can be tested against
:mod:`andpro.reference` and used directly for the attention-output-error benchmark. Shapes:

- ``queries``: ``[B, H_q, w, d]``, the last ``w`` prefill queries (post-RoPE) of every query head;
- ``keys`` / ``values``: ``[B, H_kv, L, d]`` (post-RoPE keys), ``H_q % H_kv == 0``;
- attention / pooled attention: ``[B, H_q, w, L]``;
- scores: ``[B, H, L]`` with ``H = H_q`` (``gqa_reduce="per_qhead"``) or ``H_kv`` (``"sum"``/``"mean"``).

Scores are computed in float32 (float64 for float64 inputs) whatever the input dtype, like the
official code's fp32 softmax.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "andpro_scores",
    "attn_scores",
    "candidate_mask",
    "check_qkv",
    "pool",
    "reduce_gqa",
    "snapkv_scores",
    "window_attention",
]

GQA_REDUCTIONS = ("per_qhead", "sum", "mean")


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def check_qkv(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor | None = None
) -> None:
    """Validate the shapes shared by the scoring functions (raises ``ValueError``/``TypeError``)."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected 4 dims [B, H, T, d], got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating dtype, got {t.dtype}")
    b, hq, w, d = queries.shape
    if keys.shape[0] != b or keys.shape[-1] != d:
        raise ValueError(f"keys: expected [B={b}, H_kv, L, d={d}], got {tuple(keys.shape)}")
    if hq % keys.shape[1]:
        raise ValueError(f"keys: H_kv={keys.shape[1]} must divide H_q={hq}")
    if w > keys.shape[2]:
        raise ValueError(f"queries: window w={w} exceeds the key length L={keys.shape[2]}")
    if values is not None and values.shape[:3] != keys.shape[:3]:
        raise ValueError(
            f"values: expected [B, H_kv, L]={tuple(keys.shape[:3])} leading dims, got {tuple(values.shape)}"
        )


def _expand_kv(x: torch.Tensor, num_query_heads: int) -> torch.Tensor:
    """[B, H_kv, L, d] -> [B, H_q, L, d] (query head h uses KV head h // groups, as repeat_kv)."""
    groups = num_query_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def window_attention(
    queries: torch.Tensor, keys: torch.Tensor, scaling: float | None = None
) -> torch.Tensor:
    """Softmax attention of the last ``w`` prefill queries over all ``L`` keys, causal inside the window.

    Query ``i`` sits at position ``L - w + i`` and sees keys ``j <= L - w + i``.

    Args:
        queries: ``[B, H_q, w, d]`` post-RoPE queries of the last ``w`` prompt tokens.
        keys: ``[B, H_kv, L, d]`` post-RoPE keys of the whole prompt.
        scaling: logit scale; default ``1/sqrt(d)``.

    Returns:
        ``[B, H_q, w, L]`` attention probabilities in float32 (float64 for float64 inputs).
    """
    check_qkv(queries, keys)
    dtype = _compute_dtype(queries, keys)
    b, hq, w, d = queries.shape
    hkv, length = keys.shape[1], keys.shape[2]
    scaling = 1.0 / math.sqrt(d) if scaling is None else scaling
    # Group the query heads of each KV head instead of repeating K (no copy of the keys).
    grouped = queries.to(dtype).reshape(b, hkv, (hq // hkv) * w, d)
    logits = (
        torch.matmul(grouped, keys.to(dtype).transpose(-1, -2)).view(b, hq, w, length) * scaling
    )
    qpos = torch.arange(length - w, length, device=keys.device)
    kpos = torch.arange(length, device=keys.device)
    logits = logits.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
    return torch.softmax(logits, dim=-1)


def pool(attention: torch.Tensor, kernel_size: int = 7, mode: str = "max") -> torch.Tensor:
    """Pool attention along the key axis (stride 1, padding ``kernel_size // 2``, same length).

    ``"max"`` is ``F.max_pool1d`` (AnDPro's default), ``"avg"`` is ``F.avg_pool1d`` with zero padding
    counted (SnapKV's default). ``kernel_size == 1`` is the identity.

    Args:
        attention: ``[..., L]``.
        kernel_size: odd, positive.
        mode: ``"max"`` or ``"avg"``.

    Returns:
        ``[..., L]``, same dtype.
    """
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size: expected an odd positive int, got {kernel_size!r}")
    if mode not in ("max", "avg"):
        raise ValueError(f"mode: expected 'max' or 'avg', got {mode!r}")
    if kernel_size == 1:
        return attention
    shape = attention.shape
    flat = attention.reshape(-1, 1, shape[-1])
    fn = F.max_pool1d if mode == "max" else F.avg_pool1d
    return fn(flat, kernel_size=kernel_size, stride=1, padding=kernel_size // 2).reshape(shape)


def candidate_mask(
    length: int, sink_tokens: int, window: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[L]`` bool: True for evictable tokens (not among the first ``sink_tokens`` nor the last ``window``)."""
    pos = torch.arange(length, device=device)
    return (pos >= sink_tokens) & (pos < length - window)


def reduce_gqa(scores: torch.Tensor, num_kv_heads: int, mode: str) -> torch.Tensor:
    """Reduce per-query-head scores ``[B, H_q, L]`` to the KV heads.

    Query head ``h`` belongs to KV head ``h // (H_q / H_kv)`` (transformers' ``repeat_kv`` order).

    Args:
        scores: ``[B, H_q, L]``.
        num_kv_heads: ``H_kv``.
        mode: ``"per_qhead"`` (no reduction), ``"sum"`` or ``"mean"`` over each KV head's query group.

    Returns:
        ``[B, H_q, L]`` for ``"per_qhead"``, else ``[B, H_kv, L]``.
    """
    if mode not in GQA_REDUCTIONS:
        raise ValueError(f"gqa_reduce: expected one of {GQA_REDUCTIONS}, got {mode!r}")
    if mode == "per_qhead":
        return scores
    b, hq, length = scores.shape
    grouped = scores.reshape(b, num_kv_heads, hq // num_kv_heads, length)
    return grouped.sum(2) if mode == "sum" else grouped.mean(2)


def andpro_scores(
    pooled: torch.Tensor,
    values: torch.Tensor,
    candidates: torch.Tensor,
    *,
    normalize_anchor: bool = False,
    gqa_reduce: str = "per_qhead",
) -> torch.Tensor:
    """AnDPro's per-token signed projection score.

    For each query head ``h`` and window query ``i``, the anchor is the evictable part of the output,
    ``d_i = sum_{j in D} a_ij v_j`` (``D`` = candidates, unnormalised). Token ``j`` scores
    ``s_j = <v_j, sum_i a_ij d_i> = sum_i <a_ij v_j, d_i>``; a chunk's score is the sum of its
    tokens' scores, which equals the official ``sum_i <c_iK, d_i>``.

    Args:
        pooled: ``[B, H_q, w, L]`` pooled window attention ``a``.
        values: ``[B, H_kv, L, d]``.
        candidates: ``[L]`` bool, the evictable tokens ``D``.
        normalize_anchor: divide each ``d_i`` by its norm (the paper's ``y/||y||`` view; off in the
            official code).
        gqa_reduce: ``"per_qhead"``, ``"sum"`` or ``"mean"`` (see :func:`reduce_gqa`).

    Returns:
        ``[B, H, L]`` scores (higher = keep), ``H`` as in :func:`reduce_gqa`.
    """
    if pooled.dim() != 4 or values.dim() != 4 or pooled.shape[-1] != values.shape[2]:
        raise ValueError(
            f"pooled/values: expected [B, H_q, w, L] and [B, H_kv, L, d], got {tuple(pooled.shape)} and {tuple(values.shape)}"
        )
    dtype = _compute_dtype(pooled, values)
    b, hq, w, length = pooled.shape
    hkv = values.shape[1]
    # [B, H_kv, G*w, L]: the query heads of a KV head share its values (no repeat_kv copy).
    a = pooled.to(dtype).reshape(b, hkv, (hq // hkv) * w, length)
    v = values.to(dtype)
    anchor = torch.matmul(a * candidates.to(dtype), v)  # d_i, [B, H_kv, G*w, d]
    if normalize_anchor:
        anchor = anchor / anchor.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    # s_j = sum_i a_ij <v_j, d_i>: one [w, L] product per head, then a weighted column sum.
    proj = torch.matmul(anchor, v.transpose(-1, -2))  # [B, H_kv, G*w, L]
    scores = (a * proj).view(b, hq, w, length).sum(dim=2)
    return reduce_gqa(scores, values.shape[1], gqa_reduce)


def attn_scores(
    pooled: torch.Tensor, num_kv_heads: int | None = None, *, gqa_reduce: str = "per_qhead"
) -> torch.Tensor:
    """The attention-only ablation: ``s_j = sum_i a_ij`` over the window queries.

    Args:
        pooled: ``[B, H_q, w, L]`` pooled window attention.
        num_kv_heads: needed for ``gqa_reduce != "per_qhead"``.
        gqa_reduce: see :func:`reduce_gqa`.

    Returns:
        ``[B, H, L]``.
    """
    scores = pooled.sum(dim=2)
    if gqa_reduce != "per_qhead" and num_kv_heads is None:
        raise ValueError("num_kv_heads: required when gqa_reduce is not 'per_qhead'")
    return reduce_gqa(scores, num_kv_heads or scores.shape[1], gqa_reduce)


def snapkv_scores(
    attention: torch.Tensor,
    num_kv_heads: int,
    window: int,
    *,
    kernel_size: int = 5,
    pooling: str = "avg",
    gqa_reduce: str = "mean",
) -> torch.Tensor:
    """SnapKV as in kvpress: mean over window queries of the attention to the non-window keys, then
    1-D pooling along keys, then the GQA reduction. Window keys get ``max + 1`` so they rank first.

    Args:
        attention: ``[B, H_q, w, L]`` (unpooled) window attention.
        num_kv_heads: ``H_kv``.
        window: number of protected trailing keys (``L - window`` prefix keys are scored).
        kernel_size: pooling kernel (odd).
        pooling: ``"avg"`` (kvpress) or ``"max"``.
        gqa_reduce: ``"mean"`` (kvpress), ``"sum"`` or ``"per_qhead"``.

    Returns:
        ``[B, H, L]``.
    """
    length = attention.shape[-1]
    prefix = attention[..., : length - window].mean(dim=2)  # [B, H_q, L - window]
    prefix = pool(prefix, kernel_size, pooling)
    prefix = reduce_gqa(prefix, num_kv_heads, gqa_reduce)
    top = (
        prefix.amax(dim=-1, keepdim=True) + 1
        if prefix.shape[-1]
        else prefix.new_ones(*prefix.shape[:2], 1)
    )
    return torch.cat([prefix, top.expand(*prefix.shape[:2], window)], dim=-1)
