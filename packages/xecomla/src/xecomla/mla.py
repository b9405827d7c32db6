"""Multi-head Latent Attention (MLA) with GQA KV heads, as a transformers 5.x attention module.

:class:`MLAAttention` is called like ``LlamaAttention``: ``attn(hidden_states, position_embeddings,
attention_mask, cache=None, **kwargs) -> (out, None)``, so it drops into a ``LlamaDecoderLayer`` in
place of ``self_attn``. It caches only the latents: ``c_kv`` (r_kv wide) as the ``keys`` and the
*rotated* ``k_pe`` (d_rope wide, shared by all heads) as the ``values`` of the cache layer at
``layer_idx`` (a ``DynamicLayer``: one "head", so the cache is r_kv + d_rope numbers per token).

Two ways to attend over the latent cache, equal in exact arithmetic:

* decompressed: ``[k_nope | v] = W_kvB c_kv`` per KV head, then ordinary attention (transformers'
  attention interface, so sdpa/eager follow the model's ``_attn_implementation``);
* absorbed (decode): ``q̃ = q_nope·W_uk`` (r_kv values per head), ``score = q̃·c_kv + q_pe·k_pe``,
  ``context = softmax·c_kv`` and the per-head output ``context·W_uvᵀ``; nothing of size
  ``T × n_kv·(d_nope + d_v)`` is ever formed.

With ``absorb=True`` (the default) every forward that continues a non-empty cache uses the absorbed
path; a forward without history (training, prefill) uses the decompressed one.

RoPE acts on the d_rope dims only, with its own frequencies base^(−2i/d_rope) and the scaling in
``MLAConfig.rope_scaling`` (e.g. YaRN), computed from ``position_ids`` by transformers'
``LlamaRotaryEmbedding``; the ``position_embeddings`` a Llama model passes (sized for its d_h) are
not used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["MLAAttention", "MLAConfig", "rotate_half"]


def _int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class MLAConfig:
    """Ranks and head widths of an MLA layer (the official 8B: r_q 2048, r_kv 160, 64, 64, 128).

    Args:
        r_q: rank of the query factorisation ``q = W_qB W_qA h``.
        r_kv: width of the cached KV latent ``c_kv``.
        d_nope: per-head query/key dims without RoPE.
        d_rope: RoPE dims of the query and of the shared key ``k_pe`` (0: NoPE MLA).
        d_v: per-head value dim.
        rope_scaling: extra RoPE parameters merged over the Llama model's (``rope_type``,
            ``factor``, ``original_max_position_embeddings``, ...), e.g.
            ``{"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}``;
            None keeps the Llama model's RoPE type and theta.

    Example:
        >>> cfg = MLAConfig(r_q=48, r_kv=16, d_nope=8, d_rope=8, d_v=16)
        >>> cfg.cache_width
        24
    """

    r_q: int
    r_kv: int
    d_nope: int
    d_rope: int
    d_v: int
    rope_scaling: dict | None = field(default=None)

    def __post_init__(self):
        _int("r_q", self.r_q, 1)
        _int("r_kv", self.r_kv, 1)
        _int("d_nope", self.d_nope, 0)
        _int("d_rope", self.d_rope, 0)
        _int("d_v", self.d_v, 1)
        if self.d_nope + self.d_rope < 1:
            raise ValueError(
                "d_nope, d_rope: the query/key head dim d_nope + d_rope must be >= 1, got 0 + 0"
            )
        if self.d_rope % 2:
            raise ValueError(
                f"d_rope: RoPE rotates pairs, expected an even number, got {self.d_rope}"
            )
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, dict):
            raise TypeError(
                f"rope_scaling: expected a dict or None, got {type(self.rope_scaling).__name__}"
            )

    @property
    def cache_width(self) -> int:
        """Numbers cached per token: r_kv + d_rope."""
        return self.r_kv + self.d_rope

    @property
    def qk_head_dim(self) -> int:
        return self.d_nope + self.d_rope


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1 | x2] -> [−x2 | x1]`` over the last dim (Llama's RoPE pairing, dims i and i + d/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _llama_shape(llama_config) -> tuple[int, int, int, int]:
    for attr in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
        if not hasattr(llama_config, attr):
            raise TypeError(
                f"llama_config: expected a transformers LlamaConfig (with {attr}), got {type(llama_config).__name__}"
            )
    d, n_h, n_kv = (
        llama_config.hidden_size,
        llama_config.num_attention_heads,
        llama_config.num_key_value_heads,
    )
    if n_h % n_kv:
        raise ValueError(
            f"llama_config: num_attention_heads ({n_h}) must be divisible by num_key_value_heads ({n_kv})"
        )
    d_h = getattr(llama_config, "head_dim", None) or d // n_h
    return d, n_h, n_kv, d_h


class MLAAttention(nn.Module):
    """DeepSeek-style MLA with n_kv KV heads repeated to n_h query heads (Zebra-Llama's layer).

    Args:
        config: :class:`MLAConfig`.
        llama_config: the ``LlamaConfig`` of the model the layer lives in (d, n_h, n_kv, d_h,
            RoPE theta, ``attention_bias`` for ``o_proj``, ``_attn_implementation``).
        layer_idx: this layer's index in a ``transformers.Cache``.
        absorb: decode a non-empty cache with the absorbed path (default) rather than decompressing.
        backend: of the one-token absorbed decode (:func:`xecomla.ops.mla_decode`): None (Triton on
            CUDA, torch on CPU), ``"torch"``, ``"triton"``; used when no attention mask is passed
            (a padded batch takes the masked torch path).

    Parameters: ``q_a_proj`` (d → r_q), ``q_b_proj`` (r_q → n_h·(d_nope + d_rope)), ``kv_a_proj``
    (d → r_kv + d_rope: ``[c_kv | k_pe]``), ``kv_b_proj`` (r_kv → n_kv·(d_nope + d_v), per KV head
    ``[k_nope | v]``), ``o_proj`` (n_h·d_v → d). Scores are scaled by (d_nope + d_rope)^−½.

    Example:
        >>> import torch
        >>> from transformers import DynamicCache, LlamaConfig
        >>> llama = LlamaConfig(
        ...     hidden_size=32,
        ...     num_attention_heads=4,
        ...     num_key_value_heads=2,
        ...     num_hidden_layers=1,
        ...     intermediate_size=64,
        ...     vocab_size=16,
        ... )
        >>> attn = MLAAttention(MLAConfig(r_q=16, r_kv=8, d_nope=4, d_rope=4, d_v=8), llama, 0)
        >>> cache = DynamicCache()
        >>> out, _ = attn(torch.randn(2, 5, 32), None, None, cache=cache)
        >>> out.shape, cache.layers[0].keys.shape[-1] + cache.layers[0].values.shape[-1]
        (torch.Size([2, 5, 32]), 12)
    """

    def __init__(
        self,
        config: MLAConfig,
        llama_config,
        layer_idx: int,
        *,
        absorb: bool = True,
        backend: str | None = None,
    ):
        super().__init__()
        if not isinstance(config, MLAConfig):
            raise TypeError(f"config: expected an MLAConfig, got {type(config).__name__}")
        d, n_h, n_kv, d_h = _llama_shape(llama_config)
        if config.r_kv > min(2 * n_kv * d_h, d):
            raise ValueError(
                f"r_kv: expected at most min(2·n_kv·d_h, d) = min({2 * n_kv * d_h}, {d}) (the rank of [W_k; W_v]), "
                f"got {config.r_kv}"
            )
        self.layer_idx = _int("layer_idx", layer_idx, 0)
        self.mla_config, self.config = config, llama_config
        self.hidden_size, self.num_heads, self.num_key_value_heads, self.head_dim = (
            d,
            n_h,
            n_kv,
            d_h,
        )
        self.num_key_value_groups = n_h // n_kv
        self.is_causal = True
        self.absorb = bool(absorb)
        if backend not in (None, "torch", "triton", "reference"):
            raise ValueError(
                f"backend: expected None, 'torch', 'triton' or 'reference', got {backend!r}"
            )
        self.backend = backend
        self.scaling = config.qk_head_dim**-0.5
        c = config
        self.q_a_proj = nn.Linear(d, c.r_q, bias=False)
        self.q_b_proj = nn.Linear(c.r_q, n_h * c.qk_head_dim, bias=False)
        self.kv_a_proj = nn.Linear(d, c.r_kv + c.d_rope, bias=False)
        self.kv_b_proj = nn.Linear(c.r_kv, n_kv * (c.d_nope + c.d_v), bias=False)
        self.o_proj = nn.Linear(
            n_h * c.d_v, d, bias=bool(getattr(llama_config, "attention_bias", False))
        )
        self.rotary = self._build_rotary(llama_config, config) if c.d_rope else None

    @staticmethod
    def _build_rotary(llama_config, config: MLAConfig):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        params = dict(getattr(llama_config, "rope_parameters", None) or {"rope_type": "default"})
        params.setdefault("rope_theta", getattr(llama_config, "rope_theta", 10000.0))
        if config.rope_scaling:
            params.update(config.rope_scaling)
        params.setdefault("rope_type", "default")
        rope_cfg = LlamaConfig(
            hidden_size=llama_config.hidden_size,
            num_attention_heads=llama_config.num_attention_heads,
            head_dim=config.d_rope,
            max_position_embeddings=llama_config.max_position_embeddings,
            rope_parameters=params,
        )
        return LlamaRotaryEmbedding(rope_cfg)

    # ------------------------------------------------------------------ pieces
    def rope_cos_sin(self, position_ids: torch.Tensor, like: torch.Tensor):
        """cos, sin of shape [B, T, d_rope] for ``position_ids`` [B, T] (None when d_rope = 0)."""
        if self.rotary is None:
            return None
        return self.rotary(like, position_ids)

    def project(self, hidden_states: torch.Tensor, cos_sin):
        """Queries and new latents: q_nope [B,n_h,T,d_nope], q_pe [B,n_h,T,d_rope] (rotated),
        c_kv [B,1,T,r_kv], k_pe [B,1,T,d_rope] (rotated)."""
        c = self.mla_config
        B, T, _ = hidden_states.shape
        q = (
            self.q_b_proj(self.q_a_proj(hidden_states))
            .view(B, T, self.num_heads, c.qk_head_dim)
            .transpose(1, 2)
        )
        q_nope, q_pe = q.split([c.d_nope, c.d_rope], dim=-1)
        c_kv, k_pe = self.kv_a_proj(hidden_states).unsqueeze(1).split([c.r_kv, c.d_rope], dim=-1)
        if cos_sin is not None:
            cos, sin = (t.unsqueeze(1) for t in cos_sin)
            q_pe = q_pe * cos + rotate_half(q_pe) * sin
            k_pe = k_pe * cos + rotate_half(k_pe) * sin
        return q_nope, q_pe, c_kv, k_pe

    def _kv_b_heads(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_uk [n_kv, d_nope, r_kv] and W_uv [n_kv, d_v, r_kv] from ``kv_b_proj``."""
        c = self.mla_config
        w = self.kv_b_proj.weight.view(self.num_key_value_heads, c.d_nope + c.d_v, c.r_kv)
        return w[:, : c.d_nope], w[:, c.d_nope :]

    def decompress(self, c_kv: torch.Tensor, k_pe: torch.Tensor):
        """Keys [B, n_kv, S, d_nope + d_rope] and values [B, n_kv, S, d_v] from the latent cache."""
        c = self.mla_config
        B, _, S, _ = c_kv.shape
        kv = (
            self.kv_b_proj(c_kv[:, 0])
            .view(B, S, self.num_key_value_heads, c.d_nope + c.d_v)
            .transpose(1, 2)
        )
        k_nope, v = kv.split([c.d_nope, c.d_v], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(B, self.num_key_value_heads, S, c.d_rope)], dim=-1)
        return k, v

    def attend_decompressed(self, q_nope, q_pe, c_kv, k_pe, attention_mask, **kwargs):
        """Context [B, T, n_h·d_v] through transformers' attention interface."""
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.llama.modeling_llama import eager_attention_forward

        k, v = self.decompress(c_kv, k_pe)
        q = torch.cat([q_nope, q_pe], dim=-1)
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            getattr(self.config, "_attn_implementation", None) or "sdpa", eager_attention_forward
        )
        kwargs.pop("position_ids", None)
        T, S = q.shape[-2], k.shape[-2]
        if attention_mask is None and T > 1:
            # standalone use: an explicit causal mask, aligned to the last T of S positions (sdpa's
            # is_causal aligns top-left, and eager applies none)
            allowed = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
            attention_mask = torch.zeros(T, S, dtype=q.dtype, device=q.device).masked_fill(
                ~allowed, float("-inf")
            )
            attention_mask = attention_mask[None, None]
        out, _ = interface(
            self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs
        )
        return out.reshape(*out.shape[:2], -1)

    def attend_absorbed(self, q_nope, q_pe, c_kv, k_pe, attention_mask=None):
        """Context [B, T, n_h·d_v] computed on the latents (the T queries are the last T positions).

        ``attention_mask``: None (causal only), or a 4-D [B, 1, T, ≥S] bool (True = attend) or
        additive float mask as transformers builds it; it is combined with the causal mask.
        """
        B, H, T, _ = q_nope.shape
        S = c_kv.shape[-2]
        g = self.num_key_value_groups
        w_uk, w_uv = self._kv_b_heads()
        # head h reads KV head h // g
        q_abs = torch.einsum("bhgtn,hnr->bhgtr", q_nope.view(B, H // g, g, T, -1), w_uk).reshape(
            B, H, T, -1
        )
        if T == 1 and attention_mask is None:  # one decode token: ops.mla_decode (Triton on CUDA)
            from .ops import mla_decode

            context = mla_decode(
                q_abs[:, :, 0],
                q_pe[:, :, 0],
                c_kv[:, 0],
                k_pe[:, 0],
                self.scaling,
                backend=self.backend,
            )
            out = torch.einsum("bhgr,hvr->bhgv", context.view(B, H // g, g, -1), w_uv)
            return out.reshape(B, 1, -1)
        scores = q_abs @ c_kv.transpose(-1, -2) + q_pe @ k_pe.transpose(
            -1, -2
        )  # c_kv, k_pe broadcast over heads
        scores = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
        scores = scores * self.scaling
        causal = torch.ones(T, S, dtype=torch.bool, device=scores.device).tril(S - T)
        scores = scores.masked_fill(~causal, float("-inf"))
        if attention_mask is not None:
            m = attention_mask[..., :S]
            scores = (
                scores.masked_fill(~m, float("-inf"))
                if m.dtype == torch.bool
                else scores + m.to(scores.dtype)
            )
        p = torch.softmax(scores, dim=-1).to(c_kv.dtype)
        context = p @ c_kv  # [B, H, T, r_kv]
        out = torch.einsum("bhgtr,hvr->bhgtv", context.view(B, H // g, g, T, -1), w_uv)
        return out.reshape(B, H, T, -1).transpose(1, 2).reshape(B, T, -1)

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings=None,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ):
        """``hidden_states`` [B, T, d] -> (out [B, T, d], None); appends (c_kv, k_pe) to ``cache``."""
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        else:
            kwargs.pop("past_key_values", None)
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden_states: expected [B, T, {self.hidden_size}], got shape {list(hidden_states.shape)}"
            )
        B, T, _ = hidden_states.shape
        past = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=hidden_states.device).expand(B, T)
        q_nope, q_pe, c_kv, k_pe = self.project(
            hidden_states, self.rope_cos_sin(position_ids, hidden_states)
        )
        if cache is not None:
            c_kv, k_pe = cache.update(c_kv, k_pe, self.layer_idx)
        if self.absorb and past > 0:
            out = self.attend_absorbed(q_nope, q_pe, c_kv, k_pe, attention_mask)
        else:
            out = self.attend_decompressed(q_nope, q_pe, c_kv, k_pe, attention_mask, **kwargs)
        return self.o_proj(out), None

    def extra_repr(self) -> str:
        c = self.mla_config
        return f"layer_idx={self.layer_idx}, r_q={c.r_q}, r_kv={c.r_kv}, d_nope={c.d_nope}, d_rope={c.d_rope}, d_v={c.d_v}"
