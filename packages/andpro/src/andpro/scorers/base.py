"""The scorer protocol: one small base class, one file per method (the kvpress layout)."""

from __future__ import annotations

import dataclasses
import math

import torch

from andpro import scoring

__all__ = ["Scorer", "ScoringContext"]


@dataclasses.dataclass
class ScoringContext:
    """What a scorer may look at for one layer at the end of prefill.

    Attributes:
        queries: ``[B, H_q, w, d]`` post-RoPE queries of the last ``w`` prompt tokens.
        keys: ``[B, H_kv, L, d]`` post-RoPE keys of the prompt.
        values: ``[B, H_kv, L, d]``.
        sink_tokens: leading tokens the press always keeps.
        window: trailing tokens the press always keeps (``w`` may differ for scorers with their own).
        pool_kernel: pooling kernel along keys (odd).
        scaling: attention logit scale (default ``1/sqrt(d)``).
        layer_idx: the layer being compressed.
    """

    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    sink_tokens: int = 4
    window: int = 32
    pool_kernel: int = 7
    scaling: float | None = None
    layer_idx: int = 0
    _attention: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    _pooled: dict = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        scoring.check_qkv(self.queries, self.keys, self.values)
        if self.scaling is None:
            self.scaling = 1.0 / math.sqrt(self.queries.shape[-1])

    @property
    def length(self) -> int:
        return self.keys.shape[2]

    @property
    def num_query_heads(self) -> int:
        return self.queries.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.keys.shape[1]

    def attention(self) -> torch.Tensor:
        """``[B, H_q, w, L]`` window attention (computed once per context)."""
        if self._attention is None:
            self._attention = scoring.window_attention(self.queries, self.keys, self.scaling)
        return self._attention

    def pooled(self, mode: str = "max", kernel_size: int | None = None) -> torch.Tensor:
        """``[B, H_q, w, L]`` window attention pooled along keys (cached per mode and kernel)."""
        k = self.pool_kernel if kernel_size is None else kernel_size
        if (mode, k) not in self._pooled:
            self._pooled[(mode, k)] = scoring.pool(self.attention(), k, mode)
        return self._pooled[(mode, k)]

    def candidates(self) -> torch.Tensor:
        """``[L]`` bool: the evictable tokens."""
        return scoring.candidate_mask(self.length, self.sink_tokens, self.window, self.keys.device)


class Scorer:
    """Base class: ``score(ctx) -> [B, H, L]``, higher = keep.

    ``H`` is ``H_kv`` when ``gqa_reduce`` is ``"sum"`` or ``"mean"`` (one score per shared KV head,
    reduced over its query group) and ``H_q`` when it is ``"per_qhead"`` (the official code's
    ``repeat_kv`` layout, where every query head gets its own cache).

    Subclasses implement :meth:`query_head_scores` (``[B, H_q, L]``) or, for scorers that look only
    at keys, :meth:`kv_head_scores` (``[B, H_kv, L]``).
    """

    name = "scorer"
    gqa_reduce = "sum"

    def __init__(self, gqa_reduce: str | None = None) -> None:
        if gqa_reduce is not None:
            if gqa_reduce not in scoring.GQA_REDUCTIONS:
                raise ValueError(
                    f"gqa_reduce: expected one of {scoring.GQA_REDUCTIONS}, got {gqa_reduce!r}"
                )
            self.gqa_reduce = gqa_reduce

    def query_head_scores(self, ctx: ScoringContext) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} scores KV heads only")

    def kv_head_scores(self, ctx: ScoringContext) -> torch.Tensor | None:
        """Scores of the KV heads when the scorer does not look at queries (else ``None``)."""
        return None

    def score(self, ctx: ScoringContext) -> torch.Tensor:
        """``[B, H, L]`` scores for ``ctx`` (see the class docstring for ``H``)."""
        kv = self.kv_head_scores(ctx)
        if kv is not None:
            if self.gqa_reduce == "per_qhead":
                return kv.repeat_interleave(ctx.num_query_heads // ctx.num_kv_heads, dim=1)
            return kv
        return scoring.reduce_gqa(self.query_head_scores(ctx), ctx.num_kv_heads, self.gqa_reduce)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gqa_reduce={self.gqa_reduce!r})"
