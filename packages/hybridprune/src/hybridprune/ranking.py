"""Ranking (pure functions): which Mamba2 heads/channels, attention heads and channels to keep.

Every function returns kept indices in ascending order, which is "group by group, original order
within a group": the only order that keeps every Mamba2 head on its own B/C group and every
attention head on its own KV head. Ties go to the lower index (a stable sort), so results are
deterministic.
"""

from __future__ import annotations

import torch

__all__ = ["rank_attention_heads", "rank_channels", "rank_mamba"]


def _check_scores(name: str, scores: object, ndim: int) -> torch.Tensor:
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(scores).__name__}")
    if scores.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {scores.dtype}")
    if scores.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty tensor, got shape {tuple(scores.shape)}")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return scores.detach()


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: expected {low} <= {name} <= {high}, got {value}")
    return value


def _top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries of a 1-D tensor (ties to the lower index), ascending."""
    order = torch.sort(scores, descending=True, stable=True).indices
    return torch.sort(order[:k]).values


def rank_channels(scores: torch.Tensor, keep: int) -> torch.Tensor:
    """The ``keep`` highest-scoring channels (FFN neurons, embedding channels), ascending.

    Example:
        >>> rank_channels(torch.tensor([0.1, 3.0, 2.0, 0.5]), 2)
        tensor([1, 2])
    """
    s = _check_scores("scores", scores, 1)
    keep = _check_int("keep", keep, 1, s.numel())
    return _top(s, keep)


def rank_attention_heads(scores: torch.Tensor, n_kv: int, keep_per_group: int) -> torch.Tensor:
    """Rank query heads within each KV group and keep the same number per group.

    ``scores[h]`` is the score of query head h; head h reads KV head ``h // (n_heads // n_kv)`` (the
    ``repeat_kv`` layout of transformers). KV heads are never removed.

    Example:
        >>> rank_attention_heads(torch.tensor([4.0, 3.0, 2.0, 1.0]), n_kv=2, keep_per_group=1)
        tensor([0, 2])
    """
    s = _check_scores("scores", scores, 1)
    n_heads = s.numel()
    n_kv = _check_int("n_kv", n_kv, 1, n_heads)
    if n_heads % n_kv:
        raise ValueError(f"n_kv: the {n_heads} heads of scores are not a multiple of n_kv={n_kv}")
    per = n_heads // n_kv
    keep_per_group = _check_int("keep_per_group", keep_per_group, 1, per)
    return torch.cat(
        [g * per + _top(row, keep_per_group) for g, row in enumerate(s.view(n_kv, per))]
    )


def rank_mamba(
    x_scores: torch.Tensor,
    n_groups: int,
    num_heads: int,
    head_dim: int,
    *,
    head_ranking: str = "kept_channels",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nested, group-aware Mamba2 ranking (Minitron-SSM): channels first, then heads per group.

    Args:
        x_scores: [H, P] importance of the ``x`` segment of ``in_proj``'s output.
        n_groups: G, the number of B/C groups; H must be a multiple of it.
        num_heads: H', heads to keep; a multiple of G, at most H (H'/G are kept in every group).
        head_dim: P', channels to keep per head, at most P.
        head_ranking: ``"kept_channels"`` (the paper: η_h = ‖X[h, 𝒫]‖ on the kept channel set 𝒫)
            or ``"all_channels"`` (η_h = ‖X[h, :]‖, an ablation).

    Returns:
        ``(heads, channels)``: kept head indices (ascending, H'/G in each group) and the kept channel
        set 𝒫 (ascending, shared by every head: head_dim is one scalar per layer).

    Example:
        >>> x = torch.tensor([[5.0, 1.0], [4.0, 1.0], [1.0, 1.0], [2.0, 1.0]])
        >>> rank_mamba(x, n_groups=2, num_heads=2, head_dim=1)
        (tensor([0, 3]), tensor([0]))
    """
    x = _check_scores("x_scores", x_scores, 2)
    n_h, p = x.shape
    n_groups = _check_int("n_groups", n_groups, 1, n_h)
    if n_h % n_groups:
        raise ValueError(
            f"n_groups: the {n_h} heads of x_scores are not a multiple of n_groups={n_groups}"
        )
    num_heads = _check_int("num_heads", num_heads, 1, n_h)
    if num_heads % n_groups:
        raise ValueError(
            f"num_heads: must be a multiple of n_groups={n_groups} (the same number of heads is kept "
            f"in every group), got {num_heads}"
        )
    head_dim = _check_int("head_dim", head_dim, 1, p)
    if head_ranking not in ("kept_channels", "all_channels"):
        raise ValueError(
            f"head_ranking: expected 'kept_channels' or 'all_channels', got {head_ranking!r}"
        )
    x = x.to(torch.float64)
    channels = _top(torch.linalg.vector_norm(x, dim=0), head_dim)
    cols = x[:, channels] if head_ranking == "kept_channels" else x
    eta = torch.linalg.vector_norm(cols, dim=1)
    per = n_h // n_groups
    keep = num_heads // n_groups
    heads = torch.cat([g * per + _top(row, keep) for g, row in enumerate(eta.view(n_groups, per))])
    return heads, channels
