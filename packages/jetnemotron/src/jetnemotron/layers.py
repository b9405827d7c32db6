"""JetBlock and its baselines as token mixers with the transformers 5.x attention signature.

Every block is called like ``Qwen2Attention``: ``block(hidden_states, position_embeddings,
attention_mask, cache=None, **kwargs) -> (out, None)``, so it drops into a Qwen2 decoder layer in
place of ``self_attn``. With a ``cache`` (a ``transformers.Cache`` whose entry at ``layer_idx`` is a
``LinearAttentionLayer``), the block reads and writes its conv cache (the last W raw inputs of the
conv) and its recurrent state ``S``; any number of new tokens continues the cache correctly.

Padding: the valid positions are read from ``attention_mask`` (a 2-D ``[B, T_total]`` mask with 1
for tokens, or the 4-D mask a transformers model hands its layers, whose last query row shows every
valid key); at pad positions β, g and v̂ are zeroed so the state and the conv cache see nothing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from jetnemotron.ops import dynamic_conv, dynamic_conv_step, gated_delta_rule

__all__ = ["GatedDeltaNetBlock", "JetBlock", "Mamba2Block", "valid_positions"]


def valid_positions(attention_mask: torch.Tensor | None, T: int) -> torch.Tensor | None:
    """The [B, T] bool mask of the T current tokens (None: all valid) from a 2-D or 4-D mask."""
    if attention_mask is None:
        return None
    if attention_mask.dim() == 2:
        m = attention_mask[:, -T:]
        return m.bool() if m.dtype != torch.bool else m
    if attention_mask.dim() == 4:
        m = attention_mask[:, 0, -1, -T:]  # the last query sees every valid key (left padding)
        return m if m.dtype == torch.bool else m == 0
    raise ValueError(
        f"attention_mask: expected a 2-D [B, T] or 4-D [B, 1, q, kv] mask, got shape {list(attention_mask.shape)}"
    )


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


class JetBlock(nn.Module):
    """JetBlock: Gated DeltaNet whose values pass an input-generated causal conv (no q/k convs).

    Args:
        hidden_size: model width d.
        num_heads: H.
        head_dim: key dim d_k.
        value_head_dim: value dim d_v (an integer: configure it explicitly rather than through a
            fractional ``expand_v``).
        conv_size: kernel width W (4).
        generator_reduction: r; the generator is ``d → H·d_v/r → H·d_v·W`` (H·d_v divisible by r).
        norm_eps: eps of the per-head RMSNorm of the output.
        initializer_range: std of the projections' normal init (the generator starts at zero, its
            bias ~ N(0, 0.02): at init the block is a static depthwise conv with taps b₂).
        layer_idx: this layer's index in a ``transformers.Cache``.
        qk_conv: ablation — restore static causal convs on q and k (Gated DeltaNet's).
        value_conv: ``"dynamic"`` (JetBlock) or ``"static"`` (Gated DeltaNet's depthwise conv).
        freeze_generator: ablation — keep the generator at zero (a static conv with taps b₂ only).
        chunk_size: chunk length of the gated delta rule.
        backend: backend of the ops (None: Triton on CUDA, torch on CPU).

    Example:
        >>> import torch
        >>> block = JetBlock(32, num_heads=2, head_dim=8, value_head_dim=16)
        >>> out, _ = block(torch.randn(2, 5, 32), None, None)
        >>> out.shape
        torch.Size([2, 5, 32])
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_dim: int,
        value_head_dim: int,
        conv_size: int = 4,
        generator_reduction: int = 8,
        norm_eps: float = 1e-5,
        initializer_range: float = 0.02,
        *,
        layer_idx: int | None = None,
        qk_conv: bool = False,
        value_conv: str = "dynamic",
        freeze_generator: bool = False,
        chunk_size: int = 64,
        backend: str | None = None,
    ):
        super().__init__()
        d = _positive_int("hidden_size", hidden_size)
        H = _positive_int("num_heads", num_heads)
        dk = _positive_int("head_dim", head_dim)
        dv = _positive_int("value_head_dim", value_head_dim)
        W = _positive_int("conv_size", conv_size)
        r = _positive_int("generator_reduction", generator_reduction)
        if value_conv not in ("dynamic", "static"):
            raise ValueError(f"value_conv: expected 'dynamic' or 'static', got {value_conv!r}")
        if value_conv == "dynamic" and (H * dv) % r:
            raise ValueError(
                f"generator_reduction: H·d_v = {H * dv} must be divisible by it, got {generator_reduction}"
            )
        if not (isinstance(norm_eps, (int, float)) and norm_eps > 0):
            raise ValueError(f"norm_eps: expected a float > 0, got {norm_eps!r}")
        self.hidden_size, self.num_heads, self.head_dim, self.value_head_dim = d, H, dk, dv
        self.conv_size, self.layer_idx, self.norm_eps = W, layer_idx, float(norm_eps)
        self.qk_conv, self.value_conv, self.chunk_size, self.backend = (
            qk_conv,
            value_conv,
            chunk_size,
            backend,
        )
        self.q_proj = nn.Linear(d, H * dk, bias=False)
        self.k_proj = nn.Linear(d, H * dk, bias=False)
        self.v_proj = nn.Linear(d, H * dv, bias=False)
        self.b_proj = nn.Linear(d, H, bias=False)
        self.a_proj = nn.Linear(d, H, bias=False)
        self.g_proj = nn.Linear(d, H * dv, bias=False)
        self.o_proj = nn.Linear(H * dv, d, bias=False)
        self.o_norm_weight = nn.Parameter(torch.ones(dv))
        for lin in (
            self.q_proj,
            self.k_proj,
            self.v_proj,
            self.b_proj,
            self.a_proj,
            self.g_proj,
            self.o_proj,
        ):
            nn.init.normal_(lin.weight, std=initializer_range)
        # A ~ U(0, 16) clamped away from 0 (A_log = log 0 = −∞ otherwise); dt ~ logU(1e-3, 1e-1).
        A = torch.empty(H).uniform_(0, 16).clamp_(min=1e-4)
        self.A_log = nn.Parameter(torch.log(A))
        dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp_(
            min=1e-4
        )
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        if qk_conv:
            self.qk_conv_weight = nn.Parameter(torch.empty(2 * H * dk, W))
            nn.init.normal_(self.qk_conv_weight, std=1.0 / math.sqrt(W))
        if value_conv == "dynamic":
            self.gen_down = nn.Linear(d, H * dv // r, bias=False)
            self.gen_up = nn.Linear(H * dv // r, H * dv * W, bias=True)
            nn.init.zeros_(self.gen_down.weight)
            nn.init.zeros_(self.gen_up.weight)
            nn.init.normal_(self.gen_up.bias, std=0.02)
            if freeze_generator:
                self.gen_down.weight.requires_grad_(False)
                self.gen_up.weight.requires_grad_(False)
        else:
            self.v_conv_weight = nn.Parameter(torch.empty(H * dv, W))
            nn.init.normal_(self.v_conv_weight, std=1.0 / math.sqrt(W))

    def state_bytes(self, batch_size: int = 1, dtype_bytes: int = 4) -> int:
        """Bytes of the decode cache per sequence: H·d_k·d_v state plus the W-wide conv cache."""
        conv_channels = self.num_heads * self.value_head_dim + (
            2 * self.num_heads * self.head_dim if self.qk_conv else 0
        )
        return (
            batch_size
            * dtype_bytes
            * (
                self.num_heads * self.head_dim * self.value_head_dim
                + conv_channels * self.conv_size
            )
        )

    def _conv_kernels(self, h: torch.Tensor) -> torch.Tensor:
        """[B, T, channels, W]: (static q/k taps), then the value taps (generated or static)."""
        B, T, _ = h.shape
        W = self.conv_size
        if self.value_conv == "dynamic":
            kv = self.gen_up(F.silu(self.gen_down(h))).view(B, T, -1, W)  # index c·W + w
        else:
            kv = self.v_conv_weight.to(h.dtype).expand(B, T, -1, W)
        if self.qk_conv:
            kqk = self.qk_conv_weight.to(h.dtype).expand(B, T, -1, W)
            kv = torch.cat([kqk, kv], dim=2)
        return kv

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings=None,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ) -> tuple[torch.Tensor, None]:
        if "past_key_values" in kwargs and cache is None:
            cache = kwargs.pop("past_key_values")
        h = hidden_states
        B, T, _ = h.shape
        H, dk, dv = self.num_heads, self.head_dim, self.value_head_dim
        valid = valid_positions(attention_mask, T)
        q, k, vhat = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        gdt = torch.float64 if h.dtype == torch.float64 else torch.float32  # gates in fp32 at least
        beta = torch.sigmoid(self.b_proj(h).to(gdt))
        g = -torch.exp(self.A_log.to(gdt)) * F.softplus(
            self.a_proj(h).to(gdt) + self.dt_bias.to(gdt)
        )
        if valid is not None:
            # where, not a product: pad rows may hold NaN (fully masked attention rows upstream)
            keep = valid[..., None]
            q, k, vhat = (torch.where(keep, t, 0.0) for t in (q, k, vhat))
            beta = torch.where(keep, beta, 0.0)
            g = torch.where(keep, g, 0.0)
        x = torch.cat([q, k, vhat], dim=-1) if self.qk_conv else vhat
        layer = None
        if cache is not None:
            if self.layer_idx is None:
                raise ValueError(
                    "cache: this block has no layer_idx, so it cannot find its cache entry"
                )
            layer = cache.layers[self.layer_idx]
            if not hasattr(layer, "update_recurrent_state"):
                raise ValueError(
                    f"cache: layer {self.layer_idx} is a {type(layer).__name__}, not a LinearAttentionLayer; "
                    "build the cache with jetnemotron.postnas.hybrid_cache(model)"
                )
        conv_cache = (
            layer.conv_states[0] if layer is not None and layer.has_previous_state[0] else None
        )
        state = (
            layer.recurrent_states[0]
            if layer is not None and layer.is_recurrent_states_initialized[0]
            else None
        )
        kernels = self._conv_kernels(h)
        if T == 1 and conv_cache is not None:
            y, new_conv = dynamic_conv_step(x[:, 0], kernels[:, 0], conv_cache.to(x.dtype))
            y = y[:, None]
        else:
            y, new_conv = dynamic_conv(x, kernels, cache=conv_cache, backend=self.backend)
        if valid is not None:  # the conv output at pad positions (their kernels may be NaN)
            y = torch.where(valid[..., None], y, 0.0)
        if self.qk_conv:
            q, k, v = y.split([H * dk, H * dk, H * dv], dim=-1)
        else:
            q, k, v = F.silu(q), F.silu(k), y
        o, S = gated_delta_rule(
            q.reshape(B, T, H, dk),
            k.reshape(B, T, H, dk),
            v.reshape(B, T, H, dv),
            g,
            beta,
            initial_state=state,
            output_final_state=layer is not None,
            chunk_size=self.chunk_size,
            backend=self.backend,
        )
        if layer is not None:
            layer.update_conv_state(new_conv)
            layer.update_recurrent_state(S)
        # norm then gate (fla FusedRMSNormGated, swish): RMSNorm over d_v per head, · SiLU(W_g h)
        of = o.to(gdt)
        of = (
            of
            * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + self.norm_eps)
            * self.o_norm_weight.to(gdt)
        )
        gate = F.silu(self.g_proj(h).to(gdt)).view(B, T, H, dv)
        out = (of * gate).reshape(B, T, H * dv).to(h.dtype)
        return self.o_proj(out), None


class GatedDeltaNetBlock(JetBlock):
    """Gated DeltaNet: static causal convs (W = 4, SiLU) on q, k and v, same gate and norm.

    Example:
        >>> import torch
        >>> out, _ = GatedDeltaNetBlock(32, 2, 8, 16)(torch.randn(1, 3, 32), None, None)
        >>> out.shape
        torch.Size([1, 3, 32])
    """

    def __init__(
        self,
        hidden_size,
        num_heads,
        head_dim,
        value_head_dim,
        conv_size=4,
        norm_eps=1e-5,
        initializer_range=0.02,
        **kwargs,
    ):
        kwargs.setdefault("qk_conv", True)
        kwargs.setdefault("value_conv", "static")
        super().__init__(
            hidden_size,
            num_heads,
            head_dim,
            value_head_dim,
            conv_size,
            1,
            norm_eps,
            initializer_range,
            **kwargs,
        )


class Mamba2Block(nn.Module):
    """Mamba2 (SSD) token mixer: ``transformers``' ``Mamba2Mixer`` (its torch path on CPU).

    Full-sequence forward only (training and loss evaluation); decoding through a hybrid cache is
    not wired for this baseline, and passing a ``cache`` raises.

    Args:
        hidden_size: d; num_heads: SSD heads; head_dim: SSD head dim (d_inner = H·head_dim);
        state_size: N of the SSD state (state bytes ∝ H·head_dim·N); conv_size: W; layer_idx.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_dim: int,
        state_size: int,
        conv_size: int = 4,
        *,
        layer_idx: int = 0,
        chunk_size: int = 64,
    ):
        super().__init__()
        from transformers import Mamba2Config
        from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

        hidden_size = _positive_int("hidden_size", hidden_size)
        if (num_heads * head_dim) % hidden_size:
            raise ValueError(
                f"head_dim: num_heads·head_dim = {num_heads * head_dim} must be a multiple of hidden_size "
                f"{hidden_size} (Mamba2Config's integer expand)"
            )
        cfg = Mamba2Config(
            hidden_size=hidden_size,
            num_heads=_positive_int("num_heads", num_heads),
            head_dim=_positive_int("head_dim", head_dim),
            state_size=_positive_int("state_size", state_size),
            expand=num_heads * head_dim // hidden_size,
            n_groups=1,
            conv_kernel=conv_size,
            chunk_size=chunk_size,
            use_conv_bias=True,
            use_bias=False,
        )
        self.num_heads, self.head_dim, self.state_size, self.conv_size = (
            num_heads,
            head_dim,
            state_size,
            conv_size,
        )
        self.mixer = Mamba2Mixer(cfg, layer_idx=layer_idx)

    def state_bytes(self, batch_size: int = 1, dtype_bytes: int = 4) -> int:
        """Bytes of the decode cache per sequence: SSD state plus the conv cache."""
        conv_dim = self.num_heads * self.head_dim + 2 * self.state_size
        return (
            batch_size
            * dtype_bytes
            * (self.num_heads * self.head_dim * self.state_size + conv_dim * self.conv_size)
        )

    def forward(
        self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs
    ):
        if cache is not None or kwargs.get("past_key_values") is not None:
            raise ValueError(
                "cache: Mamba2Block supports full-sequence forwards only (no hybrid-cache decoding)"
            )
        valid = valid_positions(attention_mask, hidden_states.shape[1])
        mask = None if valid is None else valid.to(hidden_states.dtype)
        return self.mixer(hidden_states, attention_mask=mask), None
