"""The chunkwise mLSTM in plain torch (the CPU path), differentiable through autograd.

The sequence is cut into chunks of length ``L`` (the last one may be shorter). Per chunk ``k``
with in-chunk cumulative log forget gates ``b_t``, chunk total ``g_k = b_L`` and
``a_t = g_k - b_t + ĩ_t`` (ĩ is the log input weight: ĩ for exp, logσ(ĩ) for sig):

* states (a sequential scan over chunks, O(S/L) steps)::

      m_k = max(g_k + m_{k-1}, max_t a_t)
      C_k = exp(g_k + m_{k-1} - m_k) C_{k-1} + (K ⊙ exp(a - m_k))ᵀ V,   n_k likewise with 1 for V

* outputs (all chunks in parallel)::

      D_ts   = b_t - b_s + ĩ_s  (s ≤ t),   m^comb_t = max(b_t + m_{k-1}, max_s D_ts)
      num_t  = exp(b_t + m_{k-1} - m^comb_t) q̂_tᵀ C_{k-1} + Σ_s (q̂_t·k_s) exp(D_ts - m^comb_t) v_s
      den_t  = same with n_{k-1} and 1 for v_s
      h_t    = num_t / (max(|den_t|, exp(-m^comb_t)) + eps)

``m`` is detached (see :mod:`tfla.reference`; :func:`tfla.mlstm` adds the exact gradient
through the returned ``m``); the running max equals the recurrent one exactly,
so this path reproduces :func:`tfla.reference.mlstm_recurrent` to round-off including ``eps``.
Compute precision: float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["mlstm_chunkwise"]


def _chunks(q, k, v, lf, li, C, n, m, *, exp_variant, normalize, eps, detach_denominator, qk_scale):
    """All chunks of equal length at once. q, k: (B,H,N,L,Dk); v: (B,H,N,L,Dv); lf, li: (B,H,N,L)."""
    _B, _H, N, L, Dk = q.shape
    b = torch.cumsum(lf, dim=-1)
    g = b[..., -1]
    a = g[..., None] - b + li
    m_loc = a.amax(-1).detach() if exp_variant else torch.zeros_like(g)
    kw = k * torch.exp(a - m_loc[..., None])[..., None]
    dC = kw.transpose(-1, -2) @ v  # (B,H,N,Dk,Dv)
    dn = kw.sum(-2)  # (B,H,N,Dk)
    C_prev, n_prev, m_prev = [], [], []
    for j in range(N):
        C_prev.append(C)
        n_prev.append(n)
        m_prev.append(m)
        gj = g[:, :, j, None]
        if exp_variant:
            m_new = torch.maximum(gj + m, m_loc[:, :, j, None]).detach()
            decay, inw = torch.exp(gj + m - m_new), torch.exp(m_loc[:, :, j, None] - m_new)
        else:
            m_new = m
            decay, inw = torch.exp(gj), 1.0
        C = (
            decay[..., None] * C + inw[..., None] * dC[:, :, j]
            if exp_variant
            else decay[..., None] * C + dC[:, :, j]
        )
        n = decay * n + inw * dn[:, :, j]
        m = m_new
    Cp = torch.stack(C_prev, dim=2)  # (B,H,N,Dk,Dv)
    npv = torch.stack(n_prev, dim=2)  # (B,H,N,Dk)
    mp = torch.stack(m_prev, dim=2)[..., 0]  # (B,H,N)

    idx = torch.arange(L, device=q.device)
    causal = idx[:, None] >= idx[None, :]
    D = torch.where(
        causal,
        b[..., :, None] - b[..., None, :] + li[..., None, :],
        torch.full((), float("-inf"), dtype=q.dtype, device=q.device),
    )
    if exp_variant:
        mcomb = torch.maximum(b + mp[..., None], D.amax(-1)).detach()
    else:
        mcomb = torch.zeros_like(b)
    qs = q * (1.0 / math.sqrt(Dk) if qk_scale is None else qk_scale)
    P = (qs @ k.transpose(-1, -2)) * torch.exp(D - mcomb[..., None])
    qi = qs * torch.exp(b + mp[..., None] - mcomb)[..., None]
    num = P @ v + qi @ Cp
    if normalize:
        den = P.sum(-1) + (qi * npv[..., None, :]).sum(-1)
        clamp = torch.exp(-mcomb) if exp_variant else torch.ones_like(den)
        d = torch.maximum(den.abs(), clamp) + eps
        if detach_denominator:
            d = d.detach()
        h = num / d[..., None]
    else:
        h = num
    return h, C, n, m


def mlstm_chunkwise(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    i: torch.Tensor,
    f: torch.Tensor,
    *,
    variant: str = "exp",
    chunk_size: int = 64,
    normalize: bool = True,
    c0: torch.Tensor | None = None,
    n0: torch.Tensor | None = None,
    m0: torch.Tensor | None = None,
    eps: float = 1e-6,
    qk_scale: float | None = None,
    detach_denominator: bool = False,
    return_last_state: bool = False,
):
    """Chunkwise mLSTM in torch, any sequence length (arguments are assumed checked; see :func:`tfla.mlstm`).

    Args:
        q, k: (B, H, S, Dqk). v: (B, H, S, Dv). i, f: (B, H, S).
        variant: ``"exp"`` or ``"sig"``.
        chunk_size: chunk length L (the last chunk holds ``S % L`` steps when S is not a multiple).
        normalize: divide by the normaliser.
        c0, n0, m0: initial states (B,H,Dqk,Dv), (B,H,Dqk), (B,H,1); zeros when None.
        eps: added to the denominator.
        qk_scale: query scale (default ``1/sqrt(Dqk)``).
        detach_denominator: denominator constant in the backward (official semantics).
        return_last_state: also return ``(C, n, m)``.

    Returns:
        h (B, H, S, Dv) in the input dtype; with ``return_last_state`` also the last state in
        float32 (float64 for float64 inputs); ``m`` is zeros for ``"sig"``.

    Example:
        >>> q = k = torch.randn(1, 2, 37, 16)
        >>> v = torch.randn(1, 2, 37, 8)
        >>> i = f = torch.randn(1, 2, 37)
        >>> mlstm_chunkwise(q, k, v, i, f, chunk_size=16).shape
        torch.Size([1, 2, 37, 8])
    """
    B, H, S, Dk = q.shape
    Dv = v.shape[-1]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    dev = q.device
    exp_variant = variant == "exp"
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    lf = F.logsigmoid(f.to(cdt))
    li = i.to(cdt) if exp_variant else F.logsigmoid(i.to(cdt))
    C = c0.to(cdt) if c0 is not None else torch.zeros(B, H, Dk, Dv, dtype=cdt, device=dev)
    n = n0.to(cdt) if n0 is not None else torch.zeros(B, H, Dk, dtype=cdt, device=dev)
    m = (
        m0.to(cdt)
        if (m0 is not None and exp_variant)
        else torch.zeros(B, H, 1, dtype=cdt, device=dev)
    )
    L = chunk_size
    NC, r = divmod(S, L)
    kw = dict(
        exp_variant=exp_variant,
        normalize=normalize,
        eps=eps,
        detach_denominator=detach_denominator,
        qk_scale=qk_scale,
    )
    outs = []
    if NC > 0:
        T = NC * L

        def split(x, d=None):
            x = x[:, :, :T]
            return x.reshape(B, H, NC, L, *(() if d is None else (d,)))

        h, C, n, m = _chunks(
            split(qc, Dk), split(kc, Dk), split(vc, Dv), split(lf), split(li), C, n, m, **kw
        )
        outs.append(h.reshape(B, H, T, Dv))
    if r > 0:
        T = NC * L

        def tail(x, d=None):
            return x[:, :, T:].reshape(B, H, 1, r, *(() if d is None else (d,)))

        h, C, n, m = _chunks(
            tail(qc, Dk), tail(kc, Dk), tail(vc, Dv), tail(lf), tail(li), C, n, m, **kw
        )
        outs.append(h.reshape(B, H, r, Dv))
    h = torch.cat(outs, dim=2).to(q.dtype) if outs else q.new_zeros(B, H, 0, Dv)
    if return_last_state:
        if not exp_variant:
            m = torch.zeros(B, H, 1, dtype=cdt, device=dev)
        return h, (C, n, m)
    return h
