"""Public ops of rdfft: argument checks, cache-free autograd and backend dispatch.

``rdfft_(x)`` overwrites ``x`` with its halfcomplex spectrum and returns it; ``irdfft_(h)``
overwrites ``h`` with the signal (carrying 1/N). Under autograd they are :class:`RdFFT` and
:class:`IrdFFT`, which call ``ctx.mark_dirty`` and save no tensor: rdFFT is a real linear map H
with ``H Hᵀ = D`` (:func:`rdfft.layout.hc_weights`), so

* ``h = rdfft(x)``:  ``grad_x = irdfft_(D ⊙ g)``
* ``x = irdfft(h)``: ``grad_h = D⁻¹ ⊙ rdfft_(g)``

each computed in place in one buffer the size of the gradient.

Backends: ``"torch"`` (stages vectorised over rows, the CPU path), ``"triton"`` (one program per
row; CUDA, or CPU tensors under ``TRITON_INTERPRET=1``), ``"reference"`` (``torch.fft`` + pack in
float64, copied back: not memory-saving, for checks) and ``"auto"`` (Triton on CUDA tensors when
usable, torch otherwise).

Example (CPU):

    >>> import torch, rdfft
    >>> x = torch.tensor([0.0, 0, 1, 0, 0, 0, -1, 0])
    >>> ptr = x.data_ptr()
    >>> h = rdfft.rdfft_(x)
    >>> h is x, x.data_ptr() == ptr
    (True, True)
    >>> torch.equal(h, torch.tensor([0.0, 0, 0, 0, 0, 2, 0, -2]))  # -0.0 == 0.0
    True
    >>> torch.equal(rdfft.irdfft_(x), torch.tensor([0.0, 0, 1, 0, 0, 0, -1, 0]))
    True
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from rdfft.fft import irdfft_rows_, rdfft_rows_
from rdfft.layout import _check_length, complex_to_hc, hc_to_complex, hc_weights
from rdfft.reference import irdfft_reference, rdfft_reference

__all__ = ["HcMatmul", "IrdFFT", "RdFFT", "hc_matmul", "irdfft", "irdfft_", "rdfft", "rdfft_"]

BACKENDS = ("auto", "torch", "triton", "reference")
_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def _check_input(x, dim, name: str = "x", in_place: bool = True) -> int:
    """Validate ``x`` for a transform along ``dim``; return the normalised dim."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPES:
        raise TypeError(
            f"{name}: expected dtype float32, float64 or bfloat16, got {x.dtype} "
            "(integer and complex tensors are not transformed)"
        )
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim: expected an int, got {type(dim).__name__}")
    if x.dim() == 0:
        raise ValueError(f"{name}: expected at least one dimension, got a 0-d tensor")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim: expected a value in [{-x.dim()}, {x.dim() - 1}], got {dim}")
    dim = dim % x.dim()
    _check_length(x.shape[dim], f"{name}.shape[{dim}] (the transform length N)")
    if in_place and x.stride(dim) != 1 and x.shape[dim] > 1:
        raise ValueError(
            f"{name}: the transform dim {dim} must be contiguous (stride 1), got stride "
            f"{x.stride(dim)}; pass x.contiguous() or move the dim last"
        )
    return dim


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


def _resolve(x: torch.Tensor, backend: str) -> str:
    if backend != "auto":
        return backend
    from neurips25_core.device import use_triton_for

    return "triton" if x.is_cuda and use_triton_for(x) else "torch"


def _rows(t: torch.Tensor, dim: int) -> torch.Tensor:
    """A (R, N) view of ``t`` with the transform dim last, or the (…, N) view when not flattenable."""
    v = t.movedim(dim, -1)
    try:
        return v.view(-1, v.shape[-1])
    except RuntimeError:
        return v


def _transform_(x: torch.Tensor, dim: int, inverse: bool, backend: str) -> torch.Tensor:
    """The raw in-place transform (no autograd, no checks beyond the backend)."""
    backend = _resolve(x, backend)
    if backend == "reference":
        fn = irdfft_reference if inverse else rdfft_reference
        with torch.no_grad():
            x.copy_(fn(x, dim))
        return x
    rows = _rows(x, dim)
    if rows.dim() != 2:  # leading dims not flattenable: transform each leading index
        for i in range(rows.shape[0]):
            sub = rows[i]
            _transform_(sub, sub.dim() - 1, inverse, backend)
        return x
    if backend == "triton":
        from rdfft.kernels import irdfft_rows_triton_, rdfft_rows_triton_

        (irdfft_rows_triton_ if inverse else rdfft_rows_triton_)(rows)
    else:
        (irdfft_rows_ if inverse else rdfft_rows_)(rows)
    return x


def _fresh_rows_buffer(g: torch.Tensor, dim: int) -> torch.Tensor:
    """A new buffer holding ``g`` with the transform dim contiguous (never aliases ``g``)."""
    moved = g.movedim(dim, -1)
    buf = torch.empty(moved.shape, dtype=g.dtype, device=g.device)
    buf.copy_(moved)
    return buf


def _weights_for(n: int, like: torch.Tensor) -> torch.Tensor:
    dtype = torch.float64 if like.dtype == torch.float64 else torch.float32
    return hc_weights(n, dtype, like.device)


class RdFFT(torch.autograd.Function):
    """In-place forward rdFFT under autograd: ``mark_dirty``, nothing saved."""

    @staticmethod
    def forward(ctx, x, dim, backend):
        _transform_(x, dim, inverse=False, backend=backend)
        ctx.mark_dirty(x)
        ctx.dim, ctx.backend = dim, backend
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        buf = _fresh_rows_buffer(g, ctx.dim)
        if buf.dtype == torch.bfloat16:
            buf.copy_(buf.float() * _weights_for(buf.shape[-1], buf))
        else:
            buf.mul_(_weights_for(buf.shape[-1], buf))
        _transform_(buf, buf.dim() - 1, inverse=True, backend=ctx.backend)
        return buf.movedim(-1, ctx.dim), None, None


class IrdFFT(torch.autograd.Function):
    """In-place inverse rdFFT under autograd: ``mark_dirty``, nothing saved."""

    @staticmethod
    def forward(ctx, h, dim, backend):
        _transform_(h, dim, inverse=True, backend=backend)
        ctx.mark_dirty(h)
        ctx.dim, ctx.backend = dim, backend
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        buf = _fresh_rows_buffer(g, ctx.dim)
        _transform_(buf, buf.dim() - 1, inverse=False, backend=ctx.backend)
        if buf.dtype == torch.bfloat16:
            buf.copy_(buf.float() / _weights_for(buf.shape[-1], buf))
        else:
            buf.div_(_weights_for(buf.shape[-1], buf))
        return buf.movedim(-1, ctx.dim), None, None


def _apply_(x, dim, backend, inverse: bool, name: str):
    dim = _check_input(x, dim, name)
    _check_backend(backend)
    if torch.is_grad_enabled() and x.requires_grad:
        if x.is_leaf:
            raise ValueError(
                f"{name}: an in-place transform of a leaf tensor that requires grad would destroy "
                f"it; use the out-of-place {'irdfft' if inverse else 'rdfft'}() or pass a non-leaf"
            )
        return (IrdFFT if inverse else RdFFT).apply(x, dim, backend)
    return _transform_(x, dim, inverse, backend)


def rdfft_(x: torch.Tensor, dim: int = -1, backend: str = "auto") -> torch.Tensor:
    """Forward rdFFT in place: ``x`` becomes its halfcomplex spectrum (unnormalised).

    Args:
        x: (..., N, ...) float32/float64/bfloat16, N a power of two >= 2 along ``dim``, stride 1
            along ``dim``. Not a leaf that requires grad.
        dim: the transform dimension.
        backend: "auto", "torch", "triton" or "reference".

    Returns:
        ``x`` (same storage), equal to ``complex_to_hc(torch.fft.rfft(x), N)``.
    """
    return _apply_(x, dim, backend, inverse=False, name="x")


def irdfft_(h: torch.Tensor, dim: int = -1, backend: str = "auto") -> torch.Tensor:
    """Inverse rdFFT in place (carries 1/N): ``h`` becomes the real signal.

    Args:
        h: (..., N, ...) halfcomplex along ``dim``; same rules as :func:`rdfft_`.
        dim: the transform dimension.
        backend: "auto", "torch", "triton" or "reference".

    Returns:
        ``h`` (same storage), equal to ``torch.fft.irfft(hc_to_complex(h), n=N)``.
    """
    return _apply_(h, dim, backend, inverse=True, name="h")


def _clone_for(x: torch.Tensor, dim: int) -> torch.Tensor:
    """A differentiable copy of ``x`` whose ``dim`` is contiguous (never aliases ``x``)."""
    return x.movedim(dim, -1).clone(memory_format=torch.contiguous_format).movedim(-1, dim)


def rdfft(x: torch.Tensor, dim: int = -1, backend: str = "auto") -> torch.Tensor:
    """Out-of-place forward rdFFT: clones ``x``, then :func:`rdfft_` on the clone.

    Example:
        >>> import torch
        >>> rdfft(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        tensor([10., -2., -2.,  2.])
    """
    dim = _check_input(x, dim, "x", in_place=False)
    return rdfft_(_clone_for(x, dim), dim, backend)


def irdfft(h: torch.Tensor, dim: int = -1, backend: str = "auto") -> torch.Tensor:
    """Out-of-place inverse rdFFT: clones ``h``, then :func:`irdfft_` on the clone.

    Example:
        >>> import torch
        >>> irdfft(torch.tensor([10.0, -2.0, -2.0, 2.0]))
        tensor([1., 2., 3., 4.])
    """
    dim = _check_input(h, dim, "h", in_place=False)
    return irdfft_(_clone_for(h, dim), dim, backend)


def _hc_matmul_forward(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    z = torch.einsum("...jk,ijk->...ik", hc_to_complex(x), hc_to_complex(p))
    return complex_to_hc(z, n).to(x.dtype)


class HcMatmul(torch.autograd.Function):
    """``Z[..., i, :] = Σ_j hc_mul(P[i, j], X[..., j])``, saving only the halfcomplex X and P.

    The complex views used inside are transient (freed before returning); the backward is the
    exact real gradient in halfcomplex coordinates: ``grad_X = Σ_i hc_mul(G_i, conj P_ij)``,
    ``grad_P = Σ_batch hc_mul(G_i, conj X_j)``.
    """

    @staticmethod
    def forward(ctx, x, p):
        ctx.save_for_backward(x, p)
        return _hc_matmul_forward(x, p)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, p = ctx.saved_tensors
        n = x.shape[-1]
        gc = hc_to_complex(g)
        grad_x = grad_p = None
        if ctx.needs_input_grad[0]:
            gx = torch.einsum("...ik,ijk->...jk", gc, hc_to_complex(p).conj())
            grad_x = complex_to_hc(gx, n).to(x.dtype)
        if ctx.needs_input_grad[1]:
            xc = hc_to_complex(x).reshape(-1, x.shape[-2], n // 2 + 1)
            gp = torch.einsum("bik,bjk->ijk", gc.reshape(-1, g.shape[-2], n // 2 + 1), xc.conj())
            grad_p = complex_to_hc(gp, n).to(p.dtype)
        return grad_x, grad_p


def hc_matmul(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Block spectral product ``Z[..., i] = Σ_j hc_mul(P[i, j], X[..., j])`` (halfcomplex).

    Args:
        x: (..., q_in, N) halfcomplex spectra of the input blocks.
        p: (q_out, q_in, N) halfcomplex spectra of the circulant coefficients.

    Returns:
        (..., q_out, N) halfcomplex, x's dtype.
    """
    for name, t in (("x", x), ("p", p)):
        if not isinstance(t, torch.Tensor) or t.dtype not in _DTYPES:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name}: expected a float32/float64/bfloat16 tensor, got {got}")
    if p.dim() != 3 or x.dim() < 2 or x.shape[-2:] != p.shape[1:]:
        raise ValueError(
            f"p: expected (q_out, q_in, N) with (q_in, N) = x.shape[-2:] = {tuple(x.shape[-2:])}, "
            f"got {tuple(p.shape)}"
        )
    return HcMatmul.apply(x, p)
