"""Public ops of xecomla: argument checks and backend dispatch.

``mla_decode`` — absorbed MLA attention of one query token per head over the latent cache:
``context_h = softmax_t((q̃_h·c_kv,t + q_pe,h·k_pe,t)·scale) · c_kv`` (r_kv wide; the caller applies
W_uv). Backends: ``"torch"`` (matmuls + softmax, CPU default), ``"triton"`` (split-T kernel with a
log-sum-exp merge, fp32; CUDA default, and on CPU under ``TRITON_INTERPRET=1``), ``"reference"``
(float64).
"""

from __future__ import annotations

import torch

__all__ = ["mla_decode"]

BACKENDS = ("torch", "triton", "reference")


def mla_decode(
    q_abs, q_pe, c_kv, k_pe, scale: float, *, backend: str | None = None
) -> torch.Tensor:
    """Latent context [B, H, r_kv] of one query token per head.

    Args:
        q_abs: [B, H, r_kv] absorbed queries q_nope·W_uk.
        q_pe: [B, H, d_rope] rotated RoPE queries (d_rope may be 0).
        c_kv: [B, S, r_kv] cached latents; k_pe: [B, S, d_rope] cached rotated keys.
        scale: (d_nope + d_rope)^−½.
        backend: None (Triton on CUDA, torch on CPU), ``"torch"``, ``"triton"`` or ``"reference"``.

    Returns:
        [B, H, r_kv] in the dtype of ``q_abs`` (float64 for ``"reference"``).

    Example:
        >>> import torch
        >>> q, c = torch.randn(1, 2, 4), torch.randn(1, 5, 4)
        >>> mla_decode(q, torch.zeros(1, 2, 0), c, torch.zeros(1, 5, 0), 0.5).shape
        torch.Size([1, 2, 4])
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend: expected None or one of {BACKENDS}, got {backend!r}")
    for name, t, dims in (
        ("q_abs", q_abs, 3),
        ("q_pe", q_pe, 3),
        ("c_kv", c_kv, 3),
        ("k_pe", k_pe, 3),
    ):
        if not isinstance(t, torch.Tensor) or t.dim() != dims:
            raise ValueError(
                f"{name}: expected a {dims}-D tensor, got {getattr(t, 'shape', type(t).__name__)}"
            )
    B, H, R = q_abs.shape
    if c_kv.shape[0] != B or c_kv.shape[2] != R or c_kv.shape[1] < 1:
        raise ValueError(f"c_kv: expected [{B}, S >= 1, {R}], got {list(c_kv.shape)}")
    if (
        q_pe.shape[:2] != (B, H)
        or tuple(k_pe.shape[:2]) != tuple(c_kv.shape[:2])
        or q_pe.shape[2] != k_pe.shape[2]
    ):
        raise ValueError(
            f"q_pe, k_pe: expected [{B}, {H}, P] and [{B}, S, P], got {list(q_pe.shape)} and {list(k_pe.shape)}"
        )
    if len({t.device for t in (q_abs, q_pe, c_kv, k_pe)}) != 1:
        raise ValueError("q_abs, q_pe, c_kv, k_pe: expected tensors on one device")
    if backend is None:
        backend = "triton" if q_abs.is_cuda else "torch"
    if backend == "triton":
        from .kernels.mla_decode import mla_decode_triton

        return mla_decode_triton(q_abs, q_pe, c_kv, k_pe, scale).to(q_abs.dtype)
    if backend == "reference":
        q_abs, q_pe, c_kv, k_pe = (t.double() for t in (q_abs, q_pe, c_kv, k_pe))
    scores = (q_abs @ c_kv.transpose(1, 2) + q_pe @ k_pe.transpose(1, 2)) * scale  # [B, H, S]
    return torch.softmax(scores, dim=-1) @ c_kv
