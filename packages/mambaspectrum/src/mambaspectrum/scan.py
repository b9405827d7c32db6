"""The selective scan of Mamba-1: argument checks, backend dispatch and the chunked torch scan.

``selective_scan_chunked`` never builds the ``(batch, d_inner, L, N)`` tensor of HF's slow path:
it walks over chunks of ``chunk`` tokens (128 by default), carrying the state between chunks;
inside a chunk it uses the log-space cumulative sum of the decay (float64), splitting any chunk
whose decay would overflow. Autograd goes through it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .reference import selective_scan_ref

BACKENDS = ("auto", "reference", "chunked", "triton")
# exp(600) ~ 1e260 leaves float64 headroom for the products with x and h.
_MAX_LOG_DECAY = 600.0
# exp(60) ~ 1e26 in float32 (max ~3e38), the same headroom for the products.
_MAX_LOG_DECAY_FP32 = 60.0


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


class _ScanSegment(torch.autograd.Function):
    """One segment of the chunked scan with a hand-written backward.

    Inputs (all ``compute_dtype``): ``delta``, ``u`` (b, d, T); ``A`` (d, N); ``B``, ``C``
    (b, T, N); ``h`` (b, d, N), the state entering the segment. Returns ``y`` (b, d, T) and the
    last state. The caller guarantees that the total log-decay of the segment fits the dtype
    (``exp(-cum)`` finite). The backward recomputes the states (nothing of size
    ``b * d * T * N`` is kept between forward and backward) and runs the adjoint recurrence
    ``G_t = dH_t + a_{t+1} G_{t+1}`` in the same log space, reversed.
    """

    @staticmethod
    def _states(delta, u, A, B, h):
        x = (delta * u)[..., None] * B[:, None]  # (b, d, T, N)
        log_decay = delta[..., None] * A[None, :, None, :]  # <= 0
        if delta.shape[-1] == 1:
            return torch.exp(log_decay) * h[:, :, None] + x, x, log_decay
        cum = log_decay.cumsum(dim=2)
        # x * exp(-cum), not x / exp(cum): exp(cum) underflows long before exp(-cum) overflows
        states = torch.exp(cum) * (h[:, :, None] + torch.cumsum(x * torch.exp(-cum), dim=2))
        return states, x, cum

    @staticmethod
    def forward(ctx, delta, u, A, B, C, h):
        states, _, cum = _ScanSegment._states(delta, u, A, B, h)
        ctx.save_for_backward(delta, u, A, B, C, h)
        # keeping the states and the log-decay (2 * b * d * T * N elements per segment) saves
        # recomputing them, a third of the backward; not kept when nothing needs a gradient
        ctx.kept = (states, cum) if any(ctx.needs_input_grad) else None
        y = torch.einsum("bdtn,btn->bdt", states, C)
        return y, states[:, :, -1].clone()

    @staticmethod
    def backward(ctx, gy, gh):
        delta, u, A, B, C, _ = ctx.saved_tensors
        states, cum = ctx.kept
        x = (delta * u)[..., None] * B[:, None]
        # gradient w.r.t. each state, from y and (at the end) from the state handed on
        dH = gy[..., None] * C[:, None] if gy is not None else torch.zeros_like(states)
        if gh is not None:
            dH[:, :, -1] += gh
        if delta.shape[-1] == 1:
            G = dH
            first_decay = torch.exp(cum[:, :, 0])
        else:
            # G_t = sum_{s >= t} exp(cum_s - cum_t) dH_s
            G = torch.exp(-cum) * torch.flip(
                torch.cumsum(torch.flip(torch.exp(cum) * dH, dims=(2,)), dim=2), dims=(2,)
            )
            first_decay = torch.exp(cum[:, :, 0])
        dC = torch.einsum("bdt,bdtn->btn", gy, states) if gy is not None else torch.zeros_like(C)
        # h_t = a_t h_{t-1} + x_t: d log a_t = G_t * a_t h_{t-1} = G_t * (h_t - x_t)
        g_log = G * (states - x)
        dA = torch.einsum("bdtn,bdt->dn", g_log, delta)
        gB = torch.einsum("bdtn,btn->bdt", G, B)  # d/d(delta * u)
        ddelta = torch.einsum("bdtn,dn->bdt", g_log, A) + gB * u
        du = gB * delta
        dB = torch.einsum("bdtn,bdt->btn", G, delta * u)
        dh = first_decay * G[:, :, 0]
        return ddelta, du, dA, dB, dC, dh


def selective_scan_chunked(
    u,
    delta,
    A,
    B,
    C,
    D=None,
    z=None,
    h0=None,
    return_last_state=False,
    chunk=128,
    compute_dtype=torch.float64,
):
    """Chunked selective scan in torch (same contract as :func:`selective_scan_ref`).

    Inside each chunk of ``chunk`` tokens the states are
    ``exp(cum_t) * (h_prev + cumsum_j(exp(-cum_j) * delta_j B_j u_j))``, with ``cum`` the
    cumulative log-decay from the chunk start, in ``compute_dtype`` (float64 by default;
    float32 halves time and memory, for training). A chunk whose total decay exceeds the dtype's
    headroom (600 nats in float64, 60 in float32: ``exp(-cum)`` must stay finite) is split in
    halves, down to single tokens, which use the plain recurrence. Each segment is one
    :class:`torch.autograd.Function` with a hand-written adjoint-scan backward (about 3x faster
    than autograd through the same ops). Memory per chunk: ``batch * d_inner * chunk * N``
    elements (twice that is kept per chunk for the backward when training); the output is cast
    back to ``u``'s dtype.

    Example:
        >>> from mambaspectrum.reference import selective_scan_ref
        >>> g = torch.Generator().manual_seed(0)
        >>> u, delta = torch.randn(2, 3, 37, generator=g), torch.rand(2, 3, 37, generator=g)
        >>> A = -torch.rand(3, 4, generator=g)
        >>> B, C = torch.randn(2, 2, 4, 37, generator=g)
        >>> y = selective_scan_chunked(u, delta, A, B, C, chunk=8)
        >>> bool(torch.allclose(y, selective_scan_ref(u, delta, A, B, C), atol=1e-5))
        True
    """
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk: expected a positive int, got {chunk!r}")
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"compute_dtype: expected torch.float32 or torch.float64, got {compute_dtype!r}"
        )
    max_log_decay = _MAX_LOG_DECAY if compute_dtype == torch.float64 else _MAX_LOG_DECAY_FP32
    out_dtype = u.dtype
    batch, d_inner, length = u.shape
    n = A.shape[1]
    cd = compute_dtype
    A_c = A.to(cd)
    delta_c, u_c = delta.to(cd), u.to(cd)
    B_c = B.to(cd).transpose(1, 2).contiguous()  # (b, T, N)
    C_c = C.to(cd).transpose(1, 2).contiguous()
    h = torch.zeros(batch, d_inner, n, dtype=cd, device=u.device)
    if h0 is not None:
        h = h + h0.to(cd)
    ys = []
    # the largest total decay of a segment is -min(A) * max over (b, d) of sum_t delta
    neg_a = (-A_c.detach()).amax(dim=1)  # (d,)

    def run(start, stop, h):
        d_c = delta_c[:, :, start:stop]
        if stop - start > 1:
            total = float((d_c.detach().sum(dim=2) * neg_a).max())
            if total > max_log_decay:
                mid = (start + stop) // 2
                return run(mid, stop, run(start, mid, h))
        y, h = _ScanSegment.apply(
            d_c, u_c[:, :, start:stop], A_c, B_c[:, start:stop], C_c[:, start:stop], h
        )
        ys.append(y)
        return h

    for start in range(0, length, chunk):
        h = run(start, min(start + chunk, length), h)
    y = torch.cat(ys, dim=-1) if ys else torch.zeros(batch, d_inner, 0, dtype=cd, device=u.device)
    if D is not None:
        y = y + u_c * D.to(cd)[None, :, None]
    if z is not None:
        y = y * F.silu(z.to(cd))
    y = y.to(out_dtype)
    return (y, h.to(out_dtype) if out_dtype != cd else h) if return_last_state else y


def _check_triton(u: torch.Tensor, needs_grad: bool) -> None:
    from neurips25_core.device import triton_available, triton_interpret

    if not triton_available():
        raise ValueError("backend: 'triton' requested but triton is not installed")
    if not u.is_cuda and not triton_interpret():
        raise ValueError(
            f"backend: 'triton' needs CUDA tensors, or TRITON_INTERPRET=1 for CPU tensors; got "
            f"device {u.device}"
        )
    if needs_grad:
        raise ValueError(
            "backend: 'triton' is forward-only (inference, calibration); use 'chunked' to train"
        )


def selective_scan(
    u,
    delta,
    A,
    B,
    C,
    D=None,
    z=None,
    h0=None,
    return_last_state=False,
    backend="auto",
    chunk=128,
    compute_dtype=torch.float64,
):
    """Mamba-1 selective scan with backend dispatch.

    Args:
        u, delta: (batch, d_inner, L); ``delta`` positive (softplus already applied).
        A: (d_inner, N). B, C: (batch, N, L). D: (d_inner,). z: gate, as ``u``. h0: (batch, d_inner, N).
        backend: ``"auto"`` (Triton on CUDA without autograd, else the chunked torch scan),
            ``"chunked"``, ``"reference"`` (float64 loop) or ``"triton"`` (forward-only kernel,
            fp32 state; CUDA, or CPU under ``TRITON_INTERPRET=1``).
        chunk, compute_dtype: the chunked scan's chunk length and arithmetic (float64 default,
            float32 for training); ignored by the other backends.

    Returns:
        y, or ``(y, last_state)`` when ``return_last_state``.

    Example:
        >>> u = torch.ones(1, 2, 5)
        >>> delta = torch.full((1, 2, 5), 0.1)
        >>> A = -torch.ones(2, 3)
        >>> B = C = torch.ones(1, 3, 5)
        >>> selective_scan(u, delta, A, B, C).shape
        torch.Size([1, 2, 5])
    """
    _check(u, delta, A, B, C, D, z, h0)
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "reference":
        return selective_scan_ref(u, delta, A, B, C, D, z, h0, return_last_state)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (u, delta, A, B, C, D, z, h0)
    )
    if backend == "auto":
        from neurips25_core.device import use_triton_for

        backend = "triton" if use_triton_for(u) and not needs_grad else "chunked"
    if backend == "triton":
        _check_triton(u, needs_grad)
        from .kernels.scan import triton_selective_scan

        return triton_selective_scan(u, delta, A, B, C, D, z, h0, return_last_state)
    return selective_scan_chunked(
        u, delta, A, B, C, D, z, h0, return_last_state, chunk=chunk, compute_dtype=compute_dtype
    )
