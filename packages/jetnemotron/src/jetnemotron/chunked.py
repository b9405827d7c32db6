"""The torch implementations used on CPU: the chunked gated delta rule and the tap-loop dynamic conv.

Chunked form (per chunk of length C starting from state S₀; γ = in-chunk cumulative sum of g,
Γ_ij = e^{γ_i − γ_j}):

* ``A_ij = β_i (k_i·k_j) Γ_ij`` for i > j (strictly lower), ``(I + A)`` is unit lower triangular;
* ``W = (I + A)⁻¹ (β ⊙ e^γ ⊙ K)`` and ``U = (I + A)⁻¹ (β ⊙ V)``, by forward substitution
  (``torch.linalg.solve_triangular(unitriangular=True)``), never a general inverse;
* ``V′ = U − W S₀``; ``O = (Q ⊙ e^γ) S₀ + (QKᵀ ⊙ Γ ⊙ tril) V′`` (Q carries the scale);
* ``S_C = e^{γ_C} S₀ + (K ⊙ e^{γ_C − γ})ᵀ V′``.

Only differences ``γ_i − γ_j <= 0`` are exponentiated: the upper triangle is masked to −inf
*before* ``exp``. Everything that does not depend on the state (A, W, U, QKᵀ) is computed for all
chunks at once; only the C-step state recurrence loops over chunks. The last chunk is padded with
``g = 0, β = 0, k = v = q = 0``, which leaves the state untouched, so any T works.
"""

from __future__ import annotations

import math

import torch

from jetnemotron.reference import l2norm

__all__ = ["dynamic_conv_taps", "gated_delta_rule_chunked"]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def prepare_chunks(q, k, v, g, beta, scale, use_qk_l2norm, chunk_size):
    """Normalise, scale, move to [B, H, N, C, ·] in the compute dtype and pad to N·C tokens."""
    cdt = _compute_dtype(q.dtype)
    B, T, H, _dk = q.shape
    q, k, v = q.to(cdt), k.to(cdt), v.to(cdt)
    g, beta = g.to(cdt), beta.to(cdt)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * scale
    C = chunk_size
    N = max(1, math.ceil(T / C))
    pad = N * C - T

    def chunk(x):
        x = x.transpose(1, 2)  # [B, H, T, ...]
        if pad:
            x = torch.nn.functional.pad(x, (0, 0, 0, pad) if x.dim() == 4 else (0, pad))
        return x.reshape(B, H, N, C, *x.shape[3:])

    return chunk(q), chunk(k), chunk(v), chunk(g), chunk(beta), N, pad


def intra_chunk(qc, kc, vc, gc, bc):
    """The state-independent parts of every chunk: γ, W, U and the masked ``QKᵀ ⊙ Γ``."""
    C = qc.shape[-2]
    gam = gc.cumsum(-1)  # [B, H, N, C], <= 0 and non-increasing
    idx = torch.arange(C, device=qc.device)
    causal = idx[:, None] >= idx[None, :]  # (``tril`` on a bool matrix is oddly slow on CPU)
    diff = gam[..., :, None] - gam[..., None, :]
    Gamma = torch.exp(diff.masked_fill(~causal, -math.inf))  # e^{γ_i − γ_j}, i >= j, else 0
    strict = idx[:, None] > idx[None, :]
    A = (bc[..., :, None] * (kc @ kc.transpose(-1, -2)) * Gamma).masked_fill(~strict, 0.0)
    eye = torch.eye(C, dtype=qc.dtype, device=qc.device)
    L = eye + A
    rhs = torch.cat([bc[..., None] * torch.exp(gam)[..., None] * kc, bc[..., None] * vc], dim=-1)
    WU = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    dk = kc.shape[-1]
    W, U = WU[..., :dk], WU[..., dk:]
    P = (qc @ kc.transpose(-1, -2)) * Gamma  # Γ is already 0 above the diagonal
    return gam, W, U, P


def gated_delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float,
    initial_state: torch.Tensor | None,
    use_qk_l2norm: bool,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked gated delta rule (differentiable by autograd). Arguments as ``ops.gated_delta_rule``.

    Returns ``(o [B, T, H, d_v] in the dtype of q, S [B, H, d_k, d_v] in float32/float64)``.
    """
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    qc, kc, vc, gc, bc, N, _ = prepare_chunks(q, k, v, g, beta, scale, use_qk_l2norm, chunk_size)
    gam, W, U, P = intra_chunk(qc, kc, vc, gc, bc)
    S = (
        torch.zeros(B, H, dk, dv, dtype=qc.dtype, device=q.device)
        if initial_state is None
        else initial_state.to(qc.dtype)
    )
    eg = torch.exp(gam)
    last = gam[..., -1:]
    k_decayed = kc * torch.exp(last - gam)[..., None]  # e^{γ_C − γ_j} <= 1
    outs = []
    for n in range(N):
        Vp = U[:, :, n] - W[:, :, n] @ S
        outs.append((qc[:, :, n] * eg[:, :, n, :, None]) @ S + P[:, :, n] @ Vp)
        S = torch.exp(last[:, :, n])[..., None] * S + k_decayed[:, :, n].transpose(-1, -2) @ Vp
    o = torch.stack(outs, dim=2).reshape(B, H, N * chunk_size, dv)[:, :, :T]
    return o.transpose(1, 2).to(q.dtype), S


def dynamic_conv_taps(
    x: torch.Tensor, kernels: torch.Tensor, past: torch.Tensor, activation: str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic conv as a loop over the W taps (no [B, T, D, W] window tensor).

    ``past`` is the [B, D, W] cache; returns ``(y [B, T, D], new cache [B, D, W])``.
    """
    T = x.shape[1]
    W = kernels.shape[-1]
    full = torch.cat([past.to(x.dtype).transpose(1, 2), x], dim=1)  # [B, W + T, D]
    z = torch.zeros_like(x)
    for w in range(W):
        # tap w multiplies input t − W + 1 + w, i.e. row t + 1 + w of ``full``
        z = z + kernels[..., w] * full[:, 1 + w : 1 + w + T]
    y = torch.nn.functional.silu(z) if activation == "silu" else z
    return y, full[:, -W:].transpose(1, 2)
