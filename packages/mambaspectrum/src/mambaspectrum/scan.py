"""The selective scan of Mamba-1: argument checks, backend dispatch and the chunked torch scan.

``selective_scan_chunked`` never builds the ``(batch, d_inner, L, N)`` tensor of HF's slow path:
it walks over chunks of ``chunk`` tokens, carrying the state between chunks; inside a chunk the
state at every position is ``exp(cum_t) h_prev + sum_{j<=t} exp(cum_t - cum_j) delta_j B_j u_j``
with ``cum`` the cumulative log-decay (summed in float64). Every exponent is ``<= 0`` (the upper
triangle is masked to ``-inf`` before ``exp``), so it cannot overflow however large ``delta * a``
gets, and autograd goes through it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .reference import selective_scan_ref

BACKENDS = ("auto", "reference", "chunked")


def _check(u, delta, A, B, C, D, z, h0):
    for name, t in (("u", u), ("delta", delta), ("A", A), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating dtype, got {t.dtype}")
    if u.dim() != 3:
        raise ValueError(f"u: expected (batch, d_inner, L), got shape {tuple(u.shape)}")
    batch, d_inner, length = u.shape
    if delta.shape != u.shape:
        raise ValueError(f"delta: expected shape {tuple(u.shape)} (as u), got {tuple(delta.shape)}")
    if A.dim() != 2 or A.shape[0] != d_inner:
        raise ValueError(f"A: expected (d_inner={d_inner}, N), got shape {tuple(A.shape)}")
    n = A.shape[1]
    for name, t in (("B", B), ("C", C)):
        if t.shape != (batch, n, length):
            raise ValueError(f"{name}: expected shape {(batch, n, length)}, got {tuple(t.shape)}")
    if D is not None and D.shape != (d_inner,):
        raise ValueError(f"D: expected shape {(d_inner,)}, got {tuple(D.shape)}")
    if z is not None and z.shape != u.shape:
        raise ValueError(f"z: expected shape {tuple(u.shape)} (as u), got {tuple(z.shape)}")
    if h0 is not None and h0.shape != (batch, d_inner, n):
        raise ValueError(f"h0: expected shape {(batch, d_inner, n)}, got {tuple(h0.shape)}")


def selective_scan_chunked(
    u, delta, A, B, C, D=None, z=None, h0=None, return_last_state=False, chunk=16
):
    """Chunked selective scan in torch (same contract as :func:`selective_scan_ref`).

    Computes in float64 for float64 inputs and in float32 otherwise (the cumulative log-decay is
    always summed in float64). Memory per chunk: ``batch * d_inner * N * chunk**2`` elements.

    Example:
        >>> from mambaspectrum.reference import selective_scan_ref
        >>> g = torch.Generator().manual_seed(0)
        >>> u, delta = torch.randn(2, 3, 37, generator=g), torch.rand(2, 3, 37, generator=g)
        >>> A = -torch.rand(3, 4, generator=g)
        ... B, C = torch.randn(2, 2, 4, 37, generator=g)
        >>> y = selective_scan_chunked(u, delta, A, B, C)
        >>> bool(torch.allclose(y, selective_scan_ref(u, delta, A, B, C), atol=1e-5))
        True
    """
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk: expected a positive int, got {chunk!r}")
    out_dtype = u.dtype
    work = torch.float64 if u.dtype == torch.float64 else torch.float32
    batch, d_inner, length = u.shape
    n = A.shape[1]
    A_w = A.to(work)
    h = torch.zeros(batch, d_inner, n, dtype=work, device=u.device)
    if h0 is not None:
        h = h + h0.to(work)
    mask = torch.ones(chunk, chunk, dtype=torch.bool, device=u.device).tril()
    ys = []
    for start in range(0, length, chunk):
        stop = min(start + chunk, length)
        t_len = stop - start
        d_c = delta[:, :, start:stop].to(work)  # (b, d, T)
        u_c = u[:, :, start:stop].to(work)
        b_c = B[:, :, start:stop].to(work).transpose(1, 2)  # (b, T, N)
        c_c = C[:, :, start:stop].to(work).transpose(1, 2)
        log_decay = d_c[..., None].double() * A_w[None, :, None, :].double()  # (b, d, T, N)
        cum = log_decay.cumsum(dim=2)
        diff = cum[:, :, :, None, :] - cum[:, :, None, :, :]  # (b, d, t, j, N)
        m = mask[:t_len, :t_len, None]
        weights = torch.exp(diff.masked_fill(~m, float("-inf")).to(work))
        x = (d_c * u_c)[..., None] * b_c[:, None]  # (b, d, T, N)
        states = (
            torch.einsum("bdtjn,bdjn->bdtn", weights, x) + torch.exp(cum.to(work)) * h[:, :, None]
        )
        ys.append(torch.einsum("bdtn,btn->bdt", states, c_c))
        h = states[:, :, -1]
    y = torch.cat(ys, dim=-1) if ys else u.new_zeros(batch, d_inner, 0, dtype=work)
    if D is not None:
        y = y + u.to(work) * D.to(work)[None, :, None]
    if z is not None:
        y = y * F.silu(z.to(work))
    y = y.to(out_dtype)
    return (y, h) if return_last_state else y


def selective_scan(
    u, delta, A, B, C, D=None, z=None, h0=None, return_last_state=False, backend="auto", chunk=16
):
    """Mamba-1 selective scan with backend dispatch.

    Args:
        u, delta: (batch, d_inner, L); ``delta`` positive (softplus already applied).
        A: (d_inner, N). B, C: (batch, N, L). D: (d_inner,). z: gate, as ``u``. h0: (batch, d_inner, N).
        backend: ``"auto"`` (the chunked torch scan), ``"chunked"`` or ``"reference"`` (float64 loop).
            There is no Triton kernel yet (see the README).

    Returns:
        y, or ``(y, last_state)`` when ``return_last_state``.

    Example:
        >>> u = torch.ones(1, 2, 5)
        ... delta = torch.full((1, 2, 5), 0.1)
        >>> A = -torch.ones(2, 3)
        ... B = C = torch.ones(1, 3, 5)
        >>> selective_scan(u, delta, A, B, C).shape
        torch.Size([1, 2, 5])
    """
    _check(u, delta, A, B, C, D, z, h0)
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "reference":
        return selective_scan_ref(u, delta, A, B, C, D, z, h0, return_last_state)
    return selective_scan_chunked(u, delta, A, B, C, D, z, h0, return_last_state, chunk=chunk)
