"""Public ops of tfla: argument checks and backend dispatch.

:func:`mlstm` is the one entry point. ``backend="auto"`` runs the Triton TFLA kernels on CUDA tensors
and the torch chunkwise implementation on CPU tensors; ``"triton"``, ``"torch"`` and ``"reference"``
force a path (``"triton"`` on CPU tensors needs ``TRITON_INTERPRET=1``). Triton is imported lazily.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from neurips25_core.device import triton_available, triton_interpret, use_triton_for

__all__ = ["mlstm"]

_VARIANTS = ("exp", "sig")
_BACKENDS = ("auto", "triton", "torch", "reference")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _check_tensor(name: str, t, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _FLOATS:
        raise TypeError(
            f"{name}: expected a floating dtype (float16, bfloat16, float32, float64), got {t.dtype}"
        )
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {_shape(t)}")


def _state_dtype(q: torch.Tensor) -> torch.dtype:
    """The dtype of the returned states and of the computation: float64 for float64 q, else float32."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _check_args(
    q, k, v, i, f, variant, chunk_size, normalize, c0, n0, m0, eps, backend, qk_scale=None
) -> None:
    _check_tensor("q", q, 4)
    B, H, S, Dk = q.shape
    _check_tensor("k", k, 4)
    if k.shape != q.shape:
        raise ValueError(f"k: expected the shape of q {_shape(q)} (B, H, S, Dqk), got {_shape(k)}")
    _check_tensor("v", v, 4)
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v: expected shape (B, H, S, Dv) = ({B}, {H}, {S}, Dv), got {_shape(v)}")
    _check_tensor("i", i, 3)
    if i.shape != q.shape[:3]:
        raise ValueError(f"i: expected shape (B, H, S) = ({B}, {H}, {S}), got {_shape(i)}")
    _check_tensor("f", f, 3)
    if f.shape != q.shape[:3]:
        raise ValueError(f"f: expected shape (B, H, S) = ({B}, {H}, {S}), got {_shape(f)}")
    for name, t in (("k", k), ("v", v), ("i", i), ("f", f)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {t.dtype}")
    for name, t in (("k", k), ("v", v), ("i", i), ("f", f)):
        if t.device != q.device:
            raise ValueError(f"{name}: expected the device of q ({q.device}), got {t.device}")
    if S < 1 or Dk < 1 or v.shape[-1] < 1:
        raise ValueError(
            f"q/v: expected non-empty sequence and head dims, got q {_shape(q)}, v {_shape(v)}"
        )
    if variant not in _VARIANTS:
        raise ValueError(f"variant: expected one of {_VARIANTS}, got {variant!r}")
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize: expected a bool, got {type(normalize).__name__}")
    if variant == "exp" and not normalize:
        raise ValueError(
            "normalize: False is only defined for variant='sig' (the unnormalised mLSTMexp output depends on the stabiliser m)"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size: expected an int, got {type(chunk_size).__name__}")
    if chunk_size < 16 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size: expected a power of two >= 16, got {chunk_size}")
    if (
        isinstance(eps, bool)
        or not isinstance(eps, (int, float))
        or not math.isfinite(eps)
        or not eps >= 0
    ):
        raise ValueError(f"eps: expected a finite float >= 0, got {eps!r}")
    if qk_scale is not None and (
        isinstance(qk_scale, bool)
        or not isinstance(qk_scale, (int, float))
        or not math.isfinite(qk_scale)
        or not qk_scale > 0
    ):
        raise ValueError(f"qk_scale: expected None or a finite float > 0, got {qk_scale!r}")
    Dv = v.shape[-1]
    for name, t, shape in (
        ("c0", c0, (B, H, Dk, Dv)),
        ("n0", n0, (B, H, Dk)),
        ("m0", m0, (B, H, 1)),
    ):
        if t is None:
            continue
        _check_tensor(name, t, len(shape))
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {_shape(t)}")
        if t.device != q.device:
            raise ValueError(f"{name}: expected the device of q ({q.device}), got {t.device}")
        if t.dtype not in (q.dtype, _state_dtype(q)):
            raise TypeError(
                f"{name}: expected the dtype of q ({q.dtype}) or the state dtype "
                f"({_state_dtype(q)}), got {t.dtype}"
            )
    if variant == "sig" and m0 is not None and bool((m0 != 0).any()):
        raise ValueError(
            "m0: mLSTMsig has no stabiliser; expected None or zeros, got nonzero values"
        )
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
    if backend == "triton":
        if not triton_available():
            raise ValueError("backend: 'triton' requested but triton is not installed")
        if not q.is_cuda and not triton_interpret():
            raise ValueError(
                "backend: 'triton' needs CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors), got tensors on "
                f"{q.device}"
            )


def _exact_last_state(i, f, m0, state):
    """Give the returned stabilised state the exact gradient through the stabiliser ``m``.

    Every backend treats ``m`` as a constant (it cancels from ``h`` at ``eps = 0``), so the
    gradient of a loss on the returned ``(C, n, m)`` missed the terms that flow through
    ``m_S``: ``C_S = exp(-m_S)·Ĉ_S`` (Ĉ unstabilised) and ``m_S`` itself. ``m_S`` has the closed
    form ``max(m0 + Σ_r lf_r, max_s(ĩ_s + Σ_{r>s} lf_r))`` (the unrolled running max); it is
    rebuilt here differentiably with its value pinned to the backend's ``m``, and ``C``, ``n`` are
    multiplied by ``exp(m − m_exact)``, which is exactly 1 in value. The gradient through the
    max is that of the arg-max path (exact away from ties, as for any max).
    """
    C, n, m = state
    if not (C.requires_grad or n.requires_grad or i.requires_grad or f.requires_grad) and (
        m0 is None or not m0.requires_grad
    ):
        return state
    sdt = m.dtype
    lf = F.logsigmoid(f.to(sdt))
    li = i.to(sdt)
    total = lf.sum(-1, keepdim=True)
    after = total - torch.cumsum(lf, dim=-1)  # Σ_{r>s} lf_r (only its gradient is used)
    start = total if m0 is None else m0.to(sdt) + total
    m_expr = torch.cat([start, li + after], dim=-1).amax(-1, keepdim=True)
    m_exact = m.detach() + (m_expr - m_expr.detach())
    one = torch.exp(m.detach() - m_exact)  # == 1 in value
    return C * one[..., None], n * one, m_exact


def mlstm(
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
    return_last_state: bool = False,
    eps: float = 1e-6,
    qk_scale: float | None = None,
    detach_denominator: bool = False,
    backend: str = "auto",
):
    """mLSTM cell over a sequence (mLSTMexp or mLSTMsig), chunkwise with TFLA kernels on GPU.

    Args:
        q: queries, (B, H, S, Dqk); scaled by ``qk_scale`` inside.
        k: keys, (B, H, S, Dqk), the dtype of q.
        v: values, (B, H, S, Dv), the dtype of q.
        i: input-gate pre-activations, (B, H, S), the dtype of q.
        f: forget-gate pre-activations, (B, H, S), the dtype of q (the forget gate is σ(f)).
        variant: ``"exp"`` (exponential input gate with max-stabiliser) or ``"sig"`` (sigmoid
            input gate, no stabiliser).
        chunk_size: chunk length, a power of two >= 16; any S is accepted.
        normalize: divide by the normaliser (``False`` allowed for ``"sig"`` only).
        c0: initial matrix memory, (B, H, Dqk, Dv); zeros when None.
        n0: initial normaliser, (B, H, Dqk); zeros when None.
        m0: initial stabiliser, (B, H, 1); zeros when None; must be None or zero for ``"sig"``.
            The states may be in the dtype of q or in the state dtype (float32, float64 for
            float64 q, which is what ``return_last_state`` gives back); they are cast to the
            compute dtype (the state dtype). Any other dtype is refused.
        return_last_state: also return the last state ``(C, n, m)``.
        eps: added to the denominator (finite, >= 0).
        qk_scale: the query scale; default ``1/sqrt(Dqk)`` (as the official kernels).
        detach_denominator: ``False`` (default) differentiates the denominator;
            ``True`` treats the denominator ``max(|nᵀq̂|, ·) + eps`` as a constant in the backward,
            the semantics of the official kernels (dv is the same, dq/dk/di/df differ).
        backend: ``"auto"``, ``"triton"``, ``"torch"`` or ``"reference"``.

    Gradients: with ``detach_denominator=False`` the gradient of ``h`` is the exact gradient of the
    forward at ``eps = 0``; at ``eps > 0`` the stabiliser ``m`` is held constant inside ``h``
    (its effect on ``h`` is the eps term, relative size ~eps/|den|). The gradient through the
    returned last state ``(C, n, m)`` is exact at any eps (the terms through ``m`` included).

    Returns:
        h, (B, H, S, Dv), in the input dtype; with ``return_last_state`` also
        ``(C (B,H,Dqk,Dv), n (B,H,Dqk), m (B,H,1))`` in float32 (float64 for float64 inputs).

    Raises:
        TypeError, ValueError: on bad arguments (checked before anything is computed).

    Example:
        >>> import torch, tfla
        >>> q = k = torch.randn(1, 2, 40, 16)
        >>> v = torch.randn(1, 2, 40, 8)
        >>> i = f = torch.randn(1, 2, 40)
        >>> h, (C, n, m) = tfla.mlstm(q, k, v, i, f, chunk_size=16, return_last_state=True)
        >>> h.shape, C.shape
        (torch.Size([1, 2, 40, 8]), torch.Size([1, 2, 16, 8]))
    """
    _check_args(q, k, v, i, f, variant, chunk_size, normalize, c0, n0, m0, eps, backend, qk_scale)
    if variant == "sig":
        m0 = None
    if backend == "auto":
        backend = "triton" if use_triton_for(q) else "torch"
    scale = float(qk_scale) if qk_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    kwargs = dict(
        variant=variant,
        normalize=normalize,
        c0=c0,
        n0=n0,
        m0=m0,
        eps=float(eps),
        qk_scale=scale,
        detach_denominator=detach_denominator,
        return_last_state=return_last_state,
    )
    if backend == "reference":
        from tfla.reference import mlstm_recurrent

        out = mlstm_recurrent(q, k, v, i, f, **kwargs)
        if return_last_state:
            h, (C, n, m) = out
            sdt = _state_dtype(q)
            out = h, (C.to(sdt), n.to(sdt), m.to(sdt))
    elif backend == "torch":
        from tfla.chunkwise import mlstm_chunkwise

        out = mlstm_chunkwise(q, k, v, i, f, chunk_size=chunk_size, **kwargs)
    else:
        from tfla.kernels import mlstm_triton

        out = mlstm_triton(q, k, v, i, f, chunk_size=chunk_size, **kwargs)
    if return_last_state and variant == "exp":
        h, state = out
        return h, _exact_last_state(i, f, m0, state)
    return out
