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
    u, delta, A, B, C, D=None, z=None, h0=None, return_last_state=False, chunk=128
):
    """Chunked selective scan in torch (same contract as :func:`selective_scan_ref`).

    Inside each chunk of ``chunk`` tokens the states are
    ``exp(cum_t) * (h_prev + cumsum_j(exp(-cum_j) * delta_j B_j u_j))``, with ``cum`` the
    cumulative log-decay from the chunk start, all in float64. A chunk whose total decay exceeds
    ``_MAX_LOG_DECAY`` (``exp(-cum)`` would overflow float64) is split in halves, down to single
    tokens, which use the plain recurrence. Memory per chunk: ``batch * d_inner * chunk * N``
    float64 elements; the output is cast back to ``u``'s dtype.

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
    out_dtype = u.dtype
    batch, d_inner, length = u.shape
    n = A.shape[1]
    A64 = A.double()
    h = torch.zeros(batch, d_inner, n, dtype=torch.float64, device=u.device)
    if h0 is not None:
        h = h + h0.double()
    ys = []

    def run(start, stop, h):
        d_c = delta[:, :, start:stop].double()  # (b, d, T)
        x = (d_c * u[:, :, start:stop].double())[..., None] * B[
            :, :, start:stop
        ].double().transpose(1, 2)[:, None]
        c_c = C[:, :, start:stop].double().transpose(1, 2)  # (b, T, N)
        log_decay = d_c[..., None] * A64[None, :, None, :]  # (b, d, T, N), <= 0
        if stop - start == 1:
            states = torch.exp(log_decay) * h[:, :, None] + x
        else:
            cum = log_decay.cumsum(dim=2)
            if float(-cum[:, :, -1].detach().min()) > _MAX_LOG_DECAY:
                mid = (start + stop) // 2
                return run(mid, stop, run(start, mid, h))
            # x * exp(-cum), not x / exp(cum): the backward of a division squares the divisor,
            # which underflows to 0 past ~350 nats and turns the gradients into inf/NaN
            states = torch.exp(cum) * (h[:, :, None] + torch.cumsum(x * torch.exp(-cum), dim=2))
        ys.append(torch.einsum("bdtn,btn->bdt", states, c_c))
        return states[:, :, -1]

    for start in range(0, length, chunk):
        h = run(start, min(start + chunk, length), h)
    y = (
        torch.cat(ys, dim=-1)
        if ys
        else torch.zeros(batch, d_inner, 0, dtype=torch.float64, device=u.device)
    )
    if D is not None:
        y = y + u.double() * D.double()[None, :, None]
    if z is not None:
        y = y * F.silu(z.double())
    y = y.to(out_dtype)
    return (y, h.to(out_dtype) if out_dtype != torch.float64 else h) if return_last_state else y


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
    u, delta, A, B, C, D=None, z=None, h0=None, return_last_state=False, backend="auto", chunk=128
):
    """Mamba-1 selective scan with backend dispatch.

    Args:
        u, delta: (batch, d_inner, L); ``delta`` positive (softplus already applied).
        A: (d_inner, N). B, C: (batch, N, L). D: (d_inner,). z: gate, as ``u``. h0: (batch, d_inner, N).
        backend: ``"auto"`` (Triton on CUDA without autograd, else the chunked torch scan),
            ``"chunked"``, ``"reference"`` (float64 loop) or ``"triton"`` (forward-only kernel,
            fp32 state; CUDA, or CPU under ``TRITON_INTERPRET=1``).

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
    return selective_scan_chunked(u, delta, A, B, C, D, z, h0, return_last_state, chunk=chunk)
