"""Naive, readable reference implementations of hybridprune: the spec in code (float64-capable)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["mamba2_mixer_reference"]


def mamba2_mixer_reference(mixer, hidden_states: torch.Tensor) -> torch.Tensor:
    """A NemotronH/Mamba2 mixer's forward as a sequential scan, one token at a time, in the input's dtype.

    Reads the layout of the spec from the module's own tensors and attributes: ``in_proj`` rows
    ``[z | x | B | C | dt]``, a depthwise causal conv over ``[x | B | C]`` then SiLU, per-head
    ``A = -exp(A_log)``, ``dt = clamp(softplus(dt + dt_bias), time_step_min)``, ``D``; head h reads the
    B/C of group ``h // (H / G)``; the gated RMSNorm over G groups of ``y * silu(z)``; ``out_proj``.
    No padding, no cache. transformers' own torch path computes the scan in float32 whatever the
    model dtype, so it matches this only to float32 precision.

    Example:
        >>> from transformers import Mamba2Config, Mamba2ForCausalLM
        >>> m = Mamba2ForCausalLM(
        ...     Mamba2Config(
        ...         vocab_size=8,
        ...         hidden_size=8,
        ...         num_hidden_layers=1,
        ...         num_heads=4,
        ...         head_dim=4,
        ...         n_groups=2,
        ...         state_size=4,
        ...     )
        ... ).double()
        >>> mamba2_mixer_reference(
        ...     m.backbone.layers[0].mixer, torch.randn(1, 5, 8, dtype=torch.float64)
        ... ).shape
        torch.Size([1, 5, 8])
    """
    x_in = hidden_states
    H, P, G, N = mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size
    d_in = H * P
    Bsz, T, _ = x_in.shape
    proj = F.linear(x_in, mixer.in_proj.weight, mixer.in_proj.bias)
    z, xbc, dt = proj.split([d_in, d_in + 2 * G * N, H], dim=-1)
    W = mixer.conv1d.weight.shape[-1]
    pad = torch.cat([xbc.new_zeros(Bsz, W - 1, xbc.shape[-1]), xbc], dim=1)
    conv = torch.zeros_like(xbc)
    for t in range(T):
        for k in range(W):
            conv[:, t] += mixer.conv1d.weight[:, 0, k] * pad[:, t + k]
    if mixer.conv1d.bias is not None:
        conv = conv + mixer.conv1d.bias
    conv = F.silu(conv)
    x, Bm, Cm = conv.split([d_in, G * N, G * N], dim=-1)
    x = x.view(Bsz, T, H, P)
    Bm = Bm.view(Bsz, T, G, N)
    Cm = Cm.view(Bsz, T, G, N)
    A = -torch.exp(mixer.A_log.to(x.dtype))
    dt = F.softplus(dt + mixer.dt_bias).clamp(
        min=mixer.time_step_limit[0], max=mixer.time_step_limit[1]
    )
    group = torch.arange(H) // (H // G)
    state = x.new_zeros(Bsz, H, P, N)
    ys = []
    for t in range(T):
        decay = torch.exp(dt[:, t] * A)  # [B, H]
        inp = dt[:, t, :, None, None] * x[:, t, :, :, None] * Bm[:, t, group, None, :]
        state = decay[:, :, None, None] * state + inp
        y = (state * Cm[:, t, group, None, :]).sum(-1) + mixer.D[:, None] * x[:, t]
        ys.append(y.reshape(Bsz, d_in))
    y = torch.stack(ys, dim=1) * F.silu(z)
    g = y.view(Bsz, T, G, d_in // G)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + mixer.norm.variance_epsilon)
    y = mixer.norm.weight * g.view(Bsz, T, d_in)
    return F.linear(y, mixer.out_proj.weight, mixer.out_proj.bias)
