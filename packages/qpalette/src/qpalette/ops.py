"""Public ops of qpalette: the quantized matmul with backend dispatch.

``qmatmul(x_r, qm)`` computes x_r · (σ ⊙ Q)ᵀ for a rotated input x_r (..., d_in). On CUDA tensors
(or under ``TRITON_INTERPRET=1`` with ``backend="triton"``) the Triton kernels run; on CPU the
matrix is dequantized to fp32 and multiplied (the official kernels are CUDA only).
"""

from __future__ import annotations

import torch

from .quantizers import T_PAIRS, QuantizedMatrix

__all__ = ["qmatmul"]

BACKENDS = ("auto", "torch", "triton")


def _to(t: torch.Tensor, device) -> torch.Tensor:
    return t if t.device == device else t.to(device)


def qmatmul(x: torch.Tensor, qm: QuantizedMatrix, backend: str = "auto") -> torch.Tensor:
    """x (..., d_in) · Ŵᵀ with Ŵ = qm.dequantize(); returns (..., d_out) float32.

    Args:
        x: rotated input.
        qm: the quantized matrix.
        backend: ``"auto"`` (Triton on CUDA, torch otherwise), ``"torch"`` or ``"triton"``.

    Example:
        >>> from qpalette.quantizers import quantize
        >>> qm = quantize(torch.randn(32, 64), "nuq-3")
        >>> qmatmul(torch.randn(2, 64), qm).shape
        torch.Size([2, 32])
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if not isinstance(qm, QuantizedMatrix):
        raise TypeError(f"qm: expected a QuantizedMatrix, got {type(qm).__name__}")
    n, k = qm.shape
    if x.shape[-1] != k:
        raise ValueError(f"x: expected last dim {k}, got {tuple(x.shape)}")
    if backend == "auto":
        backend = "triton" if x.is_cuda else "torch"
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k).to(torch.float32)
    if backend == "torch":
        w = _to(qm.dequantize(), x.device)
        return (x2 @ w.T).reshape(*lead, n)
    from .kernels.gemv import lut_gemm, tcq_gemm

    dev = x.device
    spec = qm.spec
    if spec.kind == "tcq":
        Q = qm.codebook.shape[0].bit_length() - 1
        tau = _to(qm.codebook, dev)
        if spec.half:
            kh = k // 2
            y = tcq_gemm(x2, _to(qm.codes[0], dev), tau, spec.L, spec.kv[0], Q, n, kh, 0)
            y = y + tcq_gemm(x2, _to(qm.codes[1], dev), tau, spec.L, spec.kv[1], Q, n, kh, kh)
        else:
            y = tcq_gemm(x2, _to(qm.codes[0], dev), tau, spec.L, spec.kv[0], Q, n, k, 0)
        assert qm.codes[0].shape[1] * 32 == T_PAIRS * (spec.kv[0])
    elif spec.kind == "nuq":
        y = lut_gemm(x2, _to(qm.codes[0], dev), _to(qm.codebook, dev), round(spec.bits), 1)
    else:
        y = lut_gemm(x2, _to(qm.codes[0], dev), _to(qm.codebook, dev), round(2 * spec.bits), 2)
    return (y * _to(qm.scales, dev)[None, :]).reshape(*lead, n)
