"""Metric A: how much eviction changes each head's attention output."""

from __future__ import annotations

import torch

__all__ = ["attention_output_error"]


def attention_output_error(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    keep: torch.Tensor,
    *,
    query_positions: torch.Tensor | None = None,
    normalize: str = "softmax",
    o_proj: torch.Tensor | torch.nn.Module | None = None,
    scaling: float | None = None,
) -> torch.Tensor:
    """Relative error ``||o_full - o_kept|| / ||o_full||`` per (batch, query head).

    Keys ``0..L-1`` (``L = keep.shape[-1]``) are the compressed prefix; keys ``L..T-1`` (later
    decoding tokens) are always kept. Attention is causal by ``query_positions``. The norm runs over
    the queries and the head dimension.

    Args:
        query: ``[B, H_q, Q, d]`` post-RoPE queries (window queries and/or later decoding queries).
        key, value: ``[B, H_kv, T, d]`` post-RoPE keys and values, ``T >= L``.
        keep: ``[B, H_kv, L]`` or ``[B, H_q, L]`` (per-query-head selection) bool.
        query_positions: ``[Q]`` positions of the queries; default ``T - Q .. T - 1``.
        normalize: ``"softmax"`` renormalises over the kept keys (what decoding computes);
            ``"none"`` zeroes evicted weights without renormalising (AnDPro's objective).
        o_proj: the output projection (``nn.Linear`` or weight ``[D, H_q * d]``); then the error is
            of each head's contribution ``W_o[:, h] o_h``.
        scaling: logit scale, default ``1/sqrt(d)``.

    Returns:
        ``[B, H_q]`` float64 relative errors.
    """
    if normalize not in ("softmax", "none"):
        raise ValueError(f"normalize: expected 'softmax' or 'none', got {normalize!r}")
    for name, t in (("query", query), ("key", key), ("value", value), ("keep", keep)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if query.dim() != 4 or key.dim() != 4 or value.shape != key.shape:
        raise ValueError(
            f"query/key/value: expected [B, H_q, Q, d] and two [B, H_kv, T, d], got {tuple(query.shape)}, "
            f"{tuple(key.shape)}, {tuple(value.shape)}"
        )
    b, hq, nq, d = query.shape
    hkv, total = key.shape[1], key.shape[2]
    if hq % hkv:
        raise ValueError(f"key: H_kv={hkv} must divide H_q={hq}")
    if (
        keep.dtype != torch.bool
        or keep.dim() != 3
        or keep.shape[0] != b
        or keep.shape[1] not in (hkv, hq)
    ):
        raise ValueError(
            f"keep: expected a bool [B={b}, H_kv={hkv} or H_q={hq}, L] tensor, got {tuple(keep.shape)} {keep.dtype}"
        )
    prefix = keep.shape[-1]
    if prefix > total:
        raise ValueError(f"keep: covers L={prefix} keys but only T={total} are given")
    if query_positions is None:
        query_positions = torch.arange(total - nq, total, device=query.device)
    scaling = d**-0.5 if scaling is None else scaling

    q = query.double()
    groups = hq // hkv
    k = key.double().repeat_interleave(groups, 1)
    v = value.double().repeat_interleave(groups, 1)
    kept = keep.repeat_interleave(hq // keep.shape[1], 1)  # [B, H_q, L]
    kept = torch.cat([kept, kept.new_ones(b, hq, total - prefix)], dim=-1)  # [B, H_q, T]

    logits = torch.matmul(q, k.transpose(-1, -2)) * scaling
    causal = (
        torch.arange(total, device=query.device)[None, :]
        <= query_positions.to(query.device)[:, None]
    )
    logits = logits.masked_fill(~causal, float("-inf"))
    full = torch.softmax(logits, dim=-1)
    if normalize == "softmax":
        part = torch.softmax(logits.masked_fill(~kept[:, :, None, :], float("-inf")), dim=-1)
    else:
        part = full * kept[:, :, None, :]
    o_full = torch.matmul(full, v)  # [B, H_q, Q, d]
    o_part = torch.matmul(part, v)
    if o_proj is not None:
        weight = o_proj.weight if isinstance(o_proj, torch.nn.Module) else o_proj
        w = weight.detach().double().reshape(weight.shape[0], hq, d)  # [D, H_q, d]
        o_full = torch.einsum("bhqd,ehd->bhqe", o_full, w)
        o_part = torch.einsum("bhqd,ehd->bhqe", o_part, w)
    num = (o_full - o_part).flatten(2).norm(dim=-1)
    den = o_full.flatten(2).norm(dim=-1).clamp_min(torch.finfo(torch.float64).tiny)
    return num / den
