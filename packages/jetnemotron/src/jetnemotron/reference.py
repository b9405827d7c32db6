"""Naive, readable reference implementations of jetnemotron: the spec in code (float64-capable).

* :func:`l2norm` — ``x·(Σx² + eps)^−½`` (eps inside the square root, as fla's ``l2norm``).
* :func:`gated_delta_rule_recurrent` — the gated delta rule one token at a time:
  ``S_t = e^{g_t}(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``, ``o_t = s·S_tᵀ q_t``.
* :func:`dynamic_conv_unfold` — the input-generated causal convolution by ``unfold``:
  ``y_t[c] = act(Σ_w K_t[c, w]·x_{t−W+1+w}[c])`` with the cache (or zeros) before the start.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["dynamic_conv_unfold", "gated_delta_rule_recurrent", "l2norm"]


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x·(Σx² + eps)^−½`` over the last dim (eps inside the square root)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule token by token, in the dtype of the inputs (pass float64 for a reference).

    Args:
        q, k: [B, T, H, d_k]; v: [B, T, H, d_v]; g (log decay, <= 0), beta: [B, T, H].
        scale: the query scale, default ``d_k^−½``.
        initial_state: [B, H, d_k, d_v] or None (zeros).
        use_qk_l2norm: normalise q and k (eps 1e-6 inside the square root).

    Returns:
        ``(o [B, T, H, d_v], S [B, H, d_k, d_v])``.
    """
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    scale = 1.0 / math.sqrt(dk) if scale is None else scale
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    S = (
        torch.zeros(B, H, dk, dv, dtype=q.dtype, device=q.device)
        if initial_state is None
        else initial_state.to(q.dtype)
    )
    outs = []
    for t in range(T):
        kt, vt, qt = k[:, t], v[:, t], q[:, t]  # [B, H, d]
        S = S * torch.exp(g[:, t])[..., None, None]
        # (I − β k kᵀ) S + β k vᵀ = S + β k (v − Sᵀk)ᵀ
        pred = torch.einsum("bhk,bhkv->bhv", kt, S)
        S = S + beta[:, t][..., None, None] * kt[..., :, None] * (vt - pred)[..., None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", qt, S))
    return torch.stack(outs, dim=1), S


def _activate(z: torch.Tensor, activation: str | None) -> torch.Tensor:
    return F.silu(z) if activation == "silu" else z


def dynamic_conv_unfold(
    x: torch.Tensor,
    kernels: torch.Tensor,
    *,
    cache: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Input-generated causal depthwise convolution by ``unfold`` (the reference).

    Args:
        x: [B, T, D] raw inputs (the v̂ of a JetBlock).
        kernels: [B, T, D, W]; tap ``W − 1`` multiplies the current token.
        cache: [B, D, W], the last W inputs before ``x`` (oldest first), or None (zeros).
        activation: ``"silu"`` or None.

    Returns:
        ``(y [B, T, D], cache [B, D, W])``: the new cache holds the last W inputs.
    """
    B, _T, D = x.shape
    W = kernels.shape[-1]
    past = (
        torch.zeros(B, D, W, dtype=x.dtype, device=x.device) if cache is None else cache.to(x.dtype)
    )
    full = torch.cat([past, x.transpose(1, 2)], dim=-1)  # [B, D, W + T]
    windows = full[..., 1:].unfold(-1, W, 1)  # [B, D, T, W]: window t = inputs t−W+1 … t
    z = (windows.permute(0, 2, 1, 3) * kernels).sum(-1)
    return _activate(z, activation), full[..., -W:]
