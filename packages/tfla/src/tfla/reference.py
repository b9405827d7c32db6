"""Naive, readable reference implementations of the mLSTM: the spec in code (float64-capable).

Two forms of the same function, for both input-gate variants:

* :func:`mlstm_recurrent` steps through time with the matrix memory ``C`` (Dqk×Dv), the normaliser
  ``n`` (Dqk) and, for mLSTMexp, the max-stabiliser ``m`` (initial states supported).
* :func:`mlstm_parallel` is the quadratic (attention-like) form with zero initial state.

Notation per (batch, head) and time step ``t``: ``q̂_t = q_t / sqrt(Dqk)``, ``lf_t = logσ(f̃_t)``.

mLSTMexp (exponential input gate)::

    m_t  = max(lf_t + m_{t-1}, ĩ_t)                       (m_0 = m0, zero by default)
    C_t  = exp(lf_t + m_{t-1} - m_t) C_{t-1} + exp(ĩ_t - m_t) k_t v_tᵀ
    n_t  = exp(lf_t + m_{t-1} - m_t) n_{t-1} + exp(ĩ_t - m_t) k_t
    h_t  = C_tᵀ q̂_t / (max(|n_tᵀ q̂_t|, exp(-m_t)) + eps)

mLSTMsig (sigmoid input gate, no stabiliser)::

    C_t  = exp(lf_t) C_{t-1} + σ(ĩ_t) k_t v_tᵀ,   n_t likewise
    h_t  = C_tᵀ q̂_t / (max(|n_tᵀ q̂_t|, 1) + eps)   (normalize=True)
    h_t  = C_tᵀ q̂_t                                (normalize=False)

Gradient semantics (they define what every fast path must reproduce): the stabiliser ``m`` carries
no gradient (exact at ``eps = 0``, where ``m`` cancels); the given initial ``m0`` does, through
``exp(m0)·C0`` and ``exp(m0)·n0``. With ``detach_denominator=True`` the whole denominator
``max(|n_tᵀq̂_t|, ·) + eps`` is a constant in the backward (the official kernels' semantics).

Note: the recurrent form includes ``m_0`` in the running max, the parallel form does not, so the
two agree to float64 round-off only at ``eps = 0`` (with ``eps = 1e-6`` they differ by ~1e-7); the
chunkwise paths follow the recurrent form exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["mlstm_parallel", "mlstm_recurrent"]


def _log_input_gate(i: torch.Tensor, variant: str) -> torch.Tensor:
    """The log input-gate weight before stabilisation: ĩ (exp) or logσ(ĩ) (sig)."""
    return i if variant == "exp" else F.logsigmoid(i)


def mlstm_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    i: torch.Tensor,
    f: torch.Tensor,
    *,
    variant: str = "exp",
    normalize: bool = True,
    c0: torch.Tensor | None = None,
    n0: torch.Tensor | None = None,
    m0: torch.Tensor | None = None,
    eps: float = 1e-6,
    qk_scale: float | None = None,
    detach_denominator: bool = False,
    return_last_state: bool = False,
):
    """The mLSTM as a step-by-step recurrence (computes in the dtype of ``q``).

    Args:
        q: queries, (B, H, S, Dqk).
        k: keys, (B, H, S, Dqk).
        v: values, (B, H, S, Dv).
        i: input-gate pre-activations, (B, H, S).
        f: forget-gate pre-activations, (B, H, S).
        variant: ``"exp"`` (mLSTMexp) or ``"sig"`` (mLSTMsig).
        normalize: divide by the normaliser (``False`` only meaningful for ``"sig"``).
        c0: initial matrix memory, (B, H, Dqk, Dv), default zeros.
        n0: initial normaliser, (B, H, Dqk), default zeros.
        m0: initial max-stabiliser, (B, H, 1), default zeros (exp only).
        eps: added to the denominator.
        qk_scale: query scale (default ``1/sqrt(Dqk)``).
        detach_denominator: treat the denominator as a constant in the backward.
        return_last_state: also return ``(C_S, n_S, m_S)`` (``m`` detached here; :func:`tfla.mlstm`
            adds the exact gradient through it).

    Returns:
        h, (B, H, S, Dv); with ``return_last_state`` also ``(C, n, m)`` with shapes
        (B, H, Dqk, Dv), (B, H, Dqk), (B, H, 1) (``m`` is zeros for ``"sig"``).

    Example:
        >>> q = k = torch.randn(1, 2, 5, 8, dtype=torch.float64)
        >>> v = torch.randn(1, 2, 5, 4, dtype=torch.float64)
        >>> i = f = torch.randn(1, 2, 5, dtype=torch.float64)
        >>> mlstm_recurrent(q, k, v, i, f).shape
        torch.Size([1, 2, 5, 4])
    """
    B, H, S, Dk = q.shape
    Dv = v.shape[-1]
    dt, dev = q.dtype, q.device
    scale = 1.0 / math.sqrt(Dk) if qk_scale is None else qk_scale
    C = c0.to(dt) if c0 is not None else torch.zeros(B, H, Dk, Dv, dtype=dt, device=dev)
    n = n0.to(dt) if n0 is not None else torch.zeros(B, H, Dk, dtype=dt, device=dev)
    m = (
        m0.to(dt)
        if (m0 is not None and variant == "exp")
        else torch.zeros(B, H, 1, dtype=dt, device=dev)
    )
    lf = F.logsigmoid(f.to(dt))
    li = _log_input_gate(i.to(dt), variant)
    hs = []
    for t in range(S):
        qt, kt, vt = q[:, :, t] * scale, k[:, :, t], v[:, :, t]
        lft, lit = lf[:, :, t, None], li[:, :, t, None]
        if variant == "exp":
            m_new = torch.maximum(lft + m, lit).detach()
            fg, ig = torch.exp(lft + m - m_new), torch.exp(lit - m_new)
        else:
            m_new = m
            fg, ig = torch.exp(lft), torch.exp(lit)
        C = fg[..., None] * C + ig[..., None] * kt[..., :, None] * vt[..., None, :]
        n = fg * n + ig * kt
        num = torch.einsum("bhd,bhde->bhe", qt, C)
        if normalize:
            den = (n * qt).sum(-1, keepdim=True)
            clamp = torch.exp(-m_new) if variant == "exp" else torch.ones_like(den)
            d = torch.maximum(den.abs(), clamp) + eps
            if detach_denominator:
                d = d.detach()
            hs.append(num / d)
        else:
            hs.append(num)
        m = m_new
    h = torch.stack(hs, dim=2) if hs else q.new_zeros(B, H, 0, Dv)
    if return_last_state:
        if variant == "sig":
            m = torch.zeros(B, H, 1, dtype=dt, device=dev)
        return h, (C, n, m)
    return h


def mlstm_parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    i: torch.Tensor,
    f: torch.Tensor,
    *,
    variant: str = "exp",
    normalize: bool = True,
    eps: float = 1e-6,
    qk_scale: float | None = None,
    detach_denominator: bool = False,
) -> torch.Tensor:
    """The mLSTM in its quadratic parallel form (zero initial state; O(S²) memory).

    ``F_ts = Σ_{r=s+1..t} logσ(f̃_r)`` is built as a cumulative sum of a strictly-lower-triangular
    matrix (not a difference of cumulative sums, which cancels badly for long sequences);
    ``logD_ts = F_ts + ĩ_s`` (exp) or ``F_ts + logσ(ĩ_s)`` (sig), ``-inf`` above the diagonal;
    ``m_t = max_s logD_ts`` (exp; 0 for sig); ``C̃ = (Q̂Kᵀ) ⊙ exp(logD - m)``;
    ``H = C̃V / (max(|rowsum C̃|, exp(-m)) + eps)``.

    Args:
        q, k: (B, H, S, Dqk). v: (B, H, S, Dv). i, f: (B, H, S) gate pre-activations.
        variant: ``"exp"`` or ``"sig"``.
        normalize: divide by the normaliser.
        eps: added to the denominator.
        qk_scale: query scale (default ``1/sqrt(Dqk)``).
        detach_denominator: treat the denominator as a constant in the backward.

    Returns:
        h, (B, H, S, Dv), in the dtype of ``q``.

    Example:
        >>> q = k = torch.randn(1, 2, 6, 8, dtype=torch.float64)
        >>> v = torch.randn(1, 2, 6, 4, dtype=torch.float64)
        >>> i = f = torch.randn(1, 2, 6, dtype=torch.float64)
        >>> h = mlstm_parallel(q, k, v, i, f, eps=0.0)
        >>> torch.allclose(h, mlstm_recurrent(q, k, v, i, f, eps=0.0))
        True
    """
    B, H, S, Dk = q.shape
    dt = q.dtype
    lf = F.logsigmoid(f.to(dt))
    li = _log_input_gate(i.to(dt), variant)
    idx = torch.arange(S, device=q.device)
    strict = idx[:, None] > idx[None, :]
    causal = idx[:, None] >= idx[None, :]
    # F[t, s] = sum over r in (s, t] of lf_r: cumulative sum down t of lf_t masked to t > s.
    Fm = torch.cumsum(
        torch.where(strict, lf[..., :, None], torch.zeros((), dtype=dt, device=q.device)), dim=-2
    )
    logD = torch.where(
        causal, Fm + li[..., None, :], torch.full((), float("-inf"), dtype=dt, device=q.device)
    )
    if variant == "exp":
        m = logD.amax(-1, keepdim=True).detach()
    else:
        m = torch.zeros(B, H, S, 1, dtype=dt, device=q.device)
    scale = 1.0 / math.sqrt(Dk) if qk_scale is None else qk_scale
    Ct = (q @ k.transpose(-1, -2)) * scale * torch.exp(logD - m)
    num = Ct @ v.to(dt)
    if not normalize:
        return num
    den = Ct.sum(-1, keepdim=True)
    clamp = torch.exp(-m) if variant == "exp" else torch.ones_like(den)
    d = torch.maximum(den.abs(), clamp) + eps
    if detach_denominator:
        d = d.detach()
    return num / d
