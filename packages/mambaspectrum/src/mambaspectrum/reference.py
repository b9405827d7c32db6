"""Naive, readable reference implementations: the spec in code (float64-capable).

The selective scan of Mamba-1, one token at a time, exactly as the recurrence is written in the
paper; the three scaling rules of the official code as pure functions of ``A_log``; the state
bound ``M / (1 - exp(-a * delta))`` of the spectrum argument.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

MODES = ("spectrum", "a_linear", "delta")


def selective_scan_ref(u, delta, A, B, C, D=None, z=None, h0=None, return_last_state=False):
    """Sequential selective scan in float64: the oracle.

    ``h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t`` and ``y_t = C_t . h_t + D * u_t``,
    gated by ``silu(z)``.

    Args:
        u, delta: (batch, d_inner, L); ``delta`` already positive (after softplus).
        A: (d_inner, N), negative.
        B, C: (batch, N, L).
        D: (d_inner,) or None. z: (batch, d_inner, L) or None. h0: (batch, d_inner, N) or None.

    Returns:
        y (batch, d_inner, L) in ``u``'s dtype, and the last state (batch, d_inner, N) in float64
        when ``return_last_state``.

    Example:
        >>> u = torch.ones(1, 1, 3)
        >>> delta = torch.full((1, 1, 3), 0.5)
        >>> A = -torch.ones(1, 1)
        >>> B = torch.ones(1, 1, 3)
        >>> C = torch.ones(1, 1, 3)
        >>> selective_scan_ref(u, delta, A, B, C)[0, 0]
        tensor([0.5000, 0.8033, 0.9872])
    """
    dtype = u.dtype
    u, delta, A, B, C = (t.double() for t in (u, delta, A, B, C))
    batch, d_inner, length = u.shape
    h = torch.zeros(batch, d_inner, A.shape[1], dtype=torch.float64, device=u.device)
    if h0 is not None:
        h = h + h0.double()
    ys = []
    for t in range(length):
        decay = torch.exp(delta[:, :, t, None] * A[None])
        h = decay * h + delta[:, :, t, None] * B[:, None, :, t] * u[:, :, t, None]
        ys.append((h * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else u.new_zeros(batch, d_inner, 0)
    if D is not None:
        y = y + u * D.double()[None, :, None]
    if z is not None:
        y = y * F.silu(z.double())
    y = y.to(dtype)
    return (y, h) if return_last_state else y


def mamba2_scan_ref(x, dt, A, B, C, D=None, h0=None, return_last_state=False):
    """The Mamba-2 (SSD) scan in float64 through :func:`selective_scan_ref`.

    Mamba-2 is the Mamba-1 recurrence with one scalar ``A`` and one ``delta`` per head, shared by
    the head's ``P`` channels, and ``B``/``C`` shared by the heads of a group. Shapes as in
    transformers: x (batch, L, heads, P); dt (batch, L, heads), positive (softplus, clamp and any
    scaling already applied); A (heads,), negative; B, C (batch, L, groups, N); D (heads,);
    h0 (batch, heads, P, N). Returns y (batch, L, heads, P) (and the last state, float64).

    Example:
        >>> x = torch.ones(1, 3, 2, 1)
        >>> dt = torch.full((1, 3, 2), 0.5)
        >>> B = C = torch.ones(1, 3, 1, 1)
        >>> mamba2_scan_ref(x, dt, -torch.ones(2), B, C)[0, :, 0, 0]
        tensor([0.5000, 0.8033, 0.9872])
    """
    batch, length, heads, p = x.shape
    groups, n = B.shape[2], B.shape[3]
    per = heads // groups
    ys, states = [], []
    for g in range(groups):
        hs = slice(g * per, (g + 1) * per)
        u = x[:, :, hs].permute(0, 2, 3, 1).reshape(batch, per * p, length)
        delta = dt[:, :, hs, None].expand(-1, -1, -1, p).permute(0, 2, 3, 1).reshape(u.shape)
        a = A[hs, None, None].expand(per, p, n).reshape(per * p, n)
        b = B[:, :, g].transpose(1, 2)
        c = C[:, :, g].transpose(1, 2)
        dd = None if D is None else D[hs, None].expand(per, p).reshape(-1)
        init = None if h0 is None else h0[:, hs].reshape(batch, per * p, n)
        y, h = selective_scan_ref(u, delta, a, b, c, dd, None, init, return_last_state=True)
        ys.append(y.reshape(batch, per, p, length).permute(0, 3, 1, 2))
        states.append(h.reshape(batch, per, p, n))
    y = torch.cat(ys, dim=2)
    return (y, torch.cat(states, dim=1)) if return_last_state else y


def scaled_a_log(a_log: torch.Tensor, scale, mode: str) -> torch.Tensor:
    """The new ``A_log`` under one of the official rules (``a = exp(A_log)``, ``A = -a``).

    - ``spectrum`` (perplexity/LongBench code): ``a -> a**s``, i.e. ``A_log <- s * A_log``.
    - ``a_linear`` (Mamba-2 passkey code): ``a -> s * a``, i.e. ``A_log <- A_log + log s``.
    - ``delta`` (MambaExtend): the decay part of ``delta -> s * delta`` is ``a -> s * a`` as well;
      the input part (``B`` scaled by ``s``) lives outside ``A_log``.

    Example:
        >>> a_log = torch.log(torch.tensor([0.5, 4.0]))
        >>> torch.exp(scaled_a_log(a_log, 0.5, "spectrum"))
        tensor([0.7071, 2.0000])
    """
    scale = torch.as_tensor(scale, dtype=a_log.dtype)
    if mode == "spectrum":
        return scale * a_log
    if mode in ("a_linear", "delta"):
        return a_log + torch.log(scale)
    raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


def state_bound(bound_input: float, a: float, min_delta: float) -> float:
    """``M / (1 - exp(-a * delta))``: the largest ``|h_T|`` when ``delta_t >= delta`` and ``|delta_t B_t x_t| <= M``.

    Example:
        >>> round(state_bound(1.0, 1.0, 0.1), 4)
        10.5083
    """
    return bound_input / (1.0 - math.exp(-a * min_delta))
