"""Mamba2 built from a Llama attention layer's shapes (MambaInLlama / Zebra-Llama's variant).

Dims: d_inner = n_h·d_h, d_xb = n_kv·d_h, d_state = headdim = d_h, nheads = n_h, expand 1.
``in_proj`` rows are ``[z (d_inner) | x (d_xb) | B (d_xb) | C (d_inner) | dt (n_h)]``; a depthwise
causal conv (kernel d_conv) and SiLU act on ``[x, B, C]``; x and B have n_kv groups of d_h, and
head h reads group ⌊h·n_kv/n_h⌋ (GQA's sharing); C is per head. Per head, with Δ_t =
softplus(dt_t + b_h) and A_h = −exp(A_log_h)::

    S_t = exp(Δ_t A_h) S_{t−1} + Δ_t x_t B_tᵀ        (S ∈ ℝ^{d_h×d_h})
    y_t = S_t C_t + D_h x_t
    out = W_o RMSNorm_{groups of d_h}(y ⊙ silu(z))

transformers' ``Mamba2Mixer`` has no separate x width (its x is n_h·headdim wide), so this layer
is written here; its scan is a chunked SSD in torch (:func:`ssd_chunked`), checked against the
sequential float64 :meth:`Mamba2FromAttention.reference`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .mla import _int, _llama_shape

__all__ = ["Mamba2FromAttention", "ssd_chunked"]


def ssd_chunked(x, dt, A, B, C, *, chunk_size: int = 64, initial_state=None):
    """Chunked SSD scan (no D term): within a chunk the quadratic (masked decay) form, across
    chunks the carried state.

    Args:
        x: [b, T, H, P]; dt: [b, T, H] (after softplus); A: [H] (negative); B, C: [b, T, H, N]
            (already expanded to H heads); chunk_size: Q; initial_state: [b, H, P, N] or None.

    Returns:
        y [b, T, H, P] and the final state [b, H, P, N].
    """
    b, T, H, P = x.shape
    N = B.shape[-1]
    state = x.new_zeros(b, H, P, N) if initial_state is None else initial_state
    ys = []
    for s in range(0, T, chunk_size):
        xc, dtc, Bc, Cc = (
            x[:, s : s + chunk_size],
            dt[:, s : s + chunk_size],
            B[:, s : s + chunk_size],
            C[:, s : s + chunk_size],
        )
        q = xc.shape[1]
        cum = (dtc * A).cumsum(1)  # [b, q, H], log decay from the chunk start
        causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
        diff = (cum[:, :, None] - cum[:, None, :]).masked_fill(
            ~causal[None, :, :, None], float("-inf")
        )
        scores = torch.einsum("bthn,bshn->btsh", Cc, Bc) * diff.exp()
        y = torch.einsum("btsh,bshp->bthp", scores, dtc[..., None] * xc)
        y = y + torch.einsum("bthn,bhpn->bthp", Cc, state) * cum.exp()[..., None]
        to_end = (cum[:, -1:] - cum).exp() * dtc  # [b, q, H]
        state = state * cum[:, -1].exp()[..., None, None] + torch.einsum(
            "bsh,bshp,bshn->bhpn", to_end, xc, Bc
        )
        ys.append(y)
    return torch.cat(ys, dim=1), state


class Mamba2FromAttention(nn.Module):
    """Mamba2 mixer with Llama attention's head layout (x/B from the KV heads, C from the queries).

    Args:
        llama_config: the ``LlamaConfig`` (d, n_h, n_kv, d_h, ``rms_norm_eps``).
        layer_idx: this layer's index.
        d_conv: conv kernel width (4).
        chunk_size: chunk length of the SSD scan.

    Called like a transformers 5.x attention module: ``layer(hidden_states, position_embeddings,
    attention_mask, cache=None) -> (out, None)``; positions and the causal mask are implicit and
    padding is not supported (the mask is ignored). With a ``cache`` whose layer ``layer_idx`` is a
    transformers ``LinearAttentionLayer`` it continues and updates the conv window and the SSM
    state. ``step`` decodes one token from explicit (conv_state, ssm_state).

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig
        >>> llama = LlamaConfig(
        ...     hidden_size=32,
        ...     num_attention_heads=4,
        ...     num_key_value_heads=2,
        ...     num_hidden_layers=1,
        ...     intermediate_size=64,
        ...     vocab_size=16,
        ... )
        >>> out, _ = Mamba2FromAttention(llama, 0)(torch.randn(2, 5, 32))
        >>> out.shape
        torch.Size([2, 5, 32])
    """

    def __init__(self, llama_config, layer_idx: int, d_conv: int = 4, *, chunk_size: int = 64):
        super().__init__()
        d, n_h, n_kv, d_h = _llama_shape(llama_config)
        self.layer_idx = _int("layer_idx", layer_idx, 0)
        self.d_conv = _int("d_conv", d_conv, 1)
        self.chunk_size = _int("chunk_size", chunk_size, 1)
        self.hidden_size, self.num_heads, self.num_key_value_heads, self.head_dim = (
            d,
            n_h,
            n_kv,
            d_h,
        )
        self.d_inner, self.d_xb = n_h * d_h, n_kv * d_h
        self.conv_dim = 2 * self.d_xb + self.d_inner
        self.eps = float(getattr(llama_config, "rms_norm_eps", 1e-6))
        self.in_proj = nn.Linear(d, 2 * self.d_inner + 2 * self.d_xb + n_h, bias=False)
        self.conv1d = nn.Conv1d(
            self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, bias=True
        )
        # A ~ U(1, 16); dt ~ logU(1e-3, 1e-1) floored at 1e-4, stored as its inverse softplus; D = 1
        self.A_log = nn.Parameter(torch.empty(n_h).uniform_(1, 16).log())
        dt = torch.exp(torch.rand(n_h) * (math.log(1e-1) - math.log(1e-3)) + math.log(1e-3)).clamp(
            min=1e-4
        )
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.D = nn.Parameter(torch.ones(n_h))
        self.norm_weight = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d, bias=False)

    # ------------------------------------------------------------------ pieces
    @property
    def group_of_head(self) -> torch.Tensor:
        """The x/B group each head reads: ⌊h·n_kv/n_h⌋."""
        return torch.arange(self.num_heads) * self.num_key_value_heads // self.num_heads

    def _split(self, zxbcdt):
        return zxbcdt.split([self.d_inner, self.conv_dim, self.num_heads], dim=-1)

    def _heads(self, xbc):
        """x, B expanded to n_h heads and C, each [..., n_h, d_h], from the conv output."""
        x, B, C = xbc.split([self.d_xb, self.d_xb, self.d_inner], dim=-1)
        shape = (*xbc.shape[:-1], self.num_key_value_heads, self.head_dim)
        idx = self.group_of_head.to(xbc.device)
        x = x.reshape(shape).index_select(-2, idx)
        B = B.reshape(shape).index_select(-2, idx)
        C = C.reshape(*xbc.shape[:-1], self.num_heads, self.head_dim)
        return x, B, C

    def _output(self, y, z):
        """W_o · RMSNorm over groups of d_h of (y ⊙ silu(z)); y [..., n_h, d_h], z [..., d_inner]."""
        g = (y.reshape(z.shape) * F.silu(z)).reshape(*z.shape[:-1], self.num_heads, self.head_dim)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.out_proj(g.reshape(z.shape) * self.norm_weight)

    def initial_states(self, batch_size: int, dtype=None, device=None):
        """Zero (conv_state [b, conv_dim, d_conv], ssm_state [b, n_h, d_h, d_h])."""
        p = self.in_proj.weight
        dtype, device = dtype or p.dtype, device or p.device
        return (
            torch.zeros(batch_size, self.conv_dim, self.d_conv, dtype=dtype, device=device),
            torch.zeros(
                batch_size, self.num_heads, self.head_dim, self.head_dim, dtype=dtype, device=device
            ),
        )

    def mix(self, hidden_states, conv_state=None, ssm_state=None):
        """Full-sequence scan: (out [b, T, d], y [b, T, n_h, d_h], conv_state, ssm_state).

        ``conv_state`` (the last d_conv raw conv inputs) and ``ssm_state`` continue a previous
        call; None starts from zeros.
        """
        b = hidden_states.shape[0]
        z, xbc, dt = self._split(self.in_proj(hidden_states))
        if conv_state is None:
            conv_state = hidden_states.new_zeros(b, self.conv_dim, self.d_conv)
        conv_in = torch.cat([conv_state, xbc.transpose(1, 2)], dim=-1)  # [b, conv_dim, d_conv + T]
        new_conv_state = conv_in[..., -self.d_conv :]
        xbc = F.silu(
            F.conv1d(conv_in[..., 1:], self.conv1d.weight, self.conv1d.bias, groups=self.conv_dim)
        )
        x, B, C = self._heads(xbc.transpose(1, 2))
        dt = F.softplus(dt + self.dt_bias)
        A = -self.A_log.exp()
        y, ssm_state = ssd_chunked(
            x, dt, A, B, C, chunk_size=self.chunk_size, initial_state=ssm_state
        )
        y = y + self.D[:, None] * x
        return self._output(y, z), y, new_conv_state, ssm_state

    def forward(
        self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs
    ):
        """``hidden_states`` [b, T, d] -> (out, None); from a zero state, or continuing ``cache``."""
        if cache is None:
            cache = kwargs.get("past_key_values")
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden_states: expected [B, T, {self.hidden_size}], got shape {list(hidden_states.shape)}"
            )
        if cache is None:
            return self.mix(hidden_states)[0], None
        from transformers.cache_utils import LinearAttentionCacheLayerMixin

        layers = getattr(cache, "layers", None)
        if (
            layers is None
            or len(layers) <= self.layer_idx
            or not isinstance(layers[self.layer_idx], LinearAttentionCacheLayerMixin)
        ):
            raise ValueError(
                f"cache: layer {self.layer_idx} of the cache must be a transformers LinearAttentionLayer "
                "(build the cache with xecomla.hybrid_cache(model))"
            )
        conv_state = cache.get_conv_state(self.layer_idx)
        ssm_state = cache.get_recurrent_state(self.layer_idx)
        out, _, new_conv, new_ssm = self.mix(hidden_states, conv_state, ssm_state)
        T = hidden_states.shape[1]
        # the Cache layer pads a prefill's window and appends later raw inputs, keeping the last d_conv
        new_inputs = new_conv if conv_state is None else new_conv[..., -min(T, self.d_conv) :]
        cache.update_conv_state(new_inputs, self.layer_idx, conv_kernel_size=self.d_conv)
        cache.update_recurrent_state(new_ssm, self.layer_idx)
        return out, None

    def step(self, hidden_state, conv_state, ssm_state):
        """One decode token: ``hidden_state`` [b, d] -> (out [b, d], conv_state, ssm_state) (new tensors)."""
        if hidden_state.dim() != 2 or hidden_state.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden_state: expected [B, {self.hidden_size}], got shape {list(hidden_state.shape)}"
            )
        b = hidden_state.shape[0]
        if tuple(conv_state.shape) != (b, self.conv_dim, self.d_conv):
            raise ValueError(
                f"conv_state: expected shape {[b, self.conv_dim, self.d_conv]}, got {list(conv_state.shape)}"
            )
        if tuple(ssm_state.shape) != (b, self.num_heads, self.head_dim, self.head_dim):
            raise ValueError(
                f"ssm_state: expected shape {[b, self.num_heads, self.head_dim, self.head_dim]}, got {list(ssm_state.shape)}"
            )
        z, xbc, dt = self._split(self.in_proj(hidden_state))
        conv_state = torch.cat([conv_state[..., 1:], xbc[..., None]], dim=-1)
        xbc = F.silu((conv_state * self.conv1d.weight[:, 0]).sum(-1) + self.conv1d.bias)
        x, B, C = self._heads(xbc)  # [b, n_h, d_h]
        dt = F.softplus(dt + self.dt_bias)  # [b, n_h]
        decay = torch.exp(dt * -self.A_log.exp())
        ssm_state = (
            ssm_state * decay[..., None, None] + (dt[..., None] * x)[..., :, None] * B[..., None, :]
        )
        y = torch.einsum("bhpn,bhn->bhp", ssm_state, C) + self.D[:, None] * x
        return self._output(y, z), conv_state, ssm_state

    def reference(self, hidden_states):
        """Float64 sequential scan (token by token, the recurrence as written): out [b, T, d]."""
        h = hidden_states.double()
        w = {n: p.detach().double() for n, p in self.named_parameters()}
        b, T, _ = h.shape
        zxbcdt = h @ w["in_proj.weight"].T
        z, xbc, dt = self._split(zxbcdt)
        padded = torch.cat([h.new_zeros(b, self.d_conv - 1, self.conv_dim), xbc], dim=1)
        conv = torch.stack(
            [
                (padded[:, t : t + self.d_conv] * w["conv1d.weight"][:, 0].T).sum(1)
                for t in range(T)
            ],
            dim=1,
        )
        xbc = F.silu(conv + w["conv1d.bias"])
        x, B, C = self._heads(xbc)
        dt = F.softplus(dt + w["dt_bias"])
        A = -w["A_log"].exp()
        S = h.new_zeros(b, self.num_heads, self.head_dim, self.head_dim)
        ys = []
        for t in range(T):
            S = (
                torch.exp(dt[:, t] * A)[..., None, None] * S
                + dt[:, t, :, None, None] * x[:, t, :, :, None] * B[:, t, :, None, :]
            )
            ys.append(torch.einsum("bhpn,bhn->bhp", S, C[:, t]) + w["D"][:, None] * x[:, t])
        y = torch.stack(ys, dim=1)
        g = (y.reshape(z.shape) * F.silu(z)).reshape(b, T, self.num_heads, self.head_dim)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        return (g.reshape(z.shape) * w["norm_weight"]) @ w["out_proj.weight"].T
