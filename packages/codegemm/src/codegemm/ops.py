"""Public op :func:`codebook_matmul`: argument checks, autograd, algorithm and implementation dispatch."""

from __future__ import annotations

import torch

from neurips25_core.device import use_triton_for

from .cpu import CpuLayout, cpu_layout, numba_available, psumbook_cpu
from .format import check_format
from .psumbook import PsumbookPlan, dequant_matmul, dequantize, make_plan, psumbook_matmul
from .reference import codebook_matmul_reference

__all__ = [
    "AUTO_CROSSOVER",
    "BACKENDS",
    "IMPLS",
    "NUMBA_MAX_TOKENS",
    "codebook_matmul",
    "dequantize_weight",
]

BACKENDS = ("auto", "psumbook", "psumbook_splitk", "dequant", "dequant_fused", "reference")
IMPLS = ("auto", "torch", "triton", "numba")

# Largest number of tokens N for which backend="auto" picks psumbook over dequant, per device
# type. CPU: the committed quick benchmark (results/, README) measured crossovers of 6.0, >16 and
# 11.4 tokens on its three layers (best-of timings; its rate model predicts 3.8), so 6. CUDA: no
# GPU measurement yet; 4 is the batch-1-style regime AQLM also uses (its kernels switch at 6).
AUTO_CROSSOVER = {"cpu": 6, "cuda": 4}
# Most tokens for which impl="auto" runs CPU psumbook on the numba kernel (beyond: the torch
# psumbook, whose embedding_bag over K-tiles grows more slowly with N). The committed cpu_kernels
# quick run (results/quick, 4096x4096, 1 thread) had numba ahead at N <= 2 for m2v8/m1v8/m1v4 and
# the torch psumbook ahead or level at N = 4 (m2v8: 16.0 vs 8.2 ms CPU time).
NUMBA_MAX_TOKENS = 3


def _check_x(x: torch.Tensor, in_features: int, device: torch.device) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"x: expected float32/float16/bfloat16/float64, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != in_features:
        raise ValueError(
            f"x: expected last dim K={in_features} (codes' K/v times codebooks' v), got shape {tuple(x.shape)}"
        )
    if x.device != device:
        raise ValueError(f"x: expected device {device} (that of codes), got {x.device}")


def _resolve(backend: str, impl: str, x2d: torch.Tensor) -> tuple[str, str]:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
    if backend == "auto":
        limit = AUTO_CROSSOVER.get(x2d.device.type, AUTO_CROSSOVER["cpu"])
        backend = "psumbook" if x2d.shape[0] <= limit else "dequant"
    if impl == "auto":
        if use_triton_for(x2d):
            impl = "triton"
        elif (
            backend == "psumbook"
            and x2d.shape[0] <= NUMBA_MAX_TOKENS
            and x2d.device.type == "cpu"
            and x2d.dtype != torch.float64
            and numba_available()
        ):
            impl = "numba"
        else:
            impl = "torch"
    if impl == "numba":
        if backend != "psumbook":
            raise ValueError(f"impl: 'numba' implements backend='psumbook' only, got {backend!r}")
        if x2d.device.type != "cpu" or x2d.dtype == torch.float64:
            raise TypeError(
                f"x: impl='numba' takes CPU float32/float16/bfloat16, got {x2d.dtype} on {x2d.device}"
            )
        if not numba_available():
            raise RuntimeError("impl='numba' needs numba: pip install 'codegemm[cpu]'")
    if impl == "triton" and x2d.dtype == torch.float64:
        raise TypeError("x: the Triton kernels take float32/float16/bfloat16, got torch.float64")
    return backend, impl


def _forward(x2d, codes, codebooks, scales, backend, impl, plan, shape, layout=None):
    if impl == "numba":
        if layout is None:
            layout = cpu_layout(codes, codebooks, scales)
        return psumbook_cpu(x2d, layout, shape.codebook_size).to(x2d.dtype)
    if backend == "reference":
        return codebook_matmul_reference(x2d, codes, codebooks, scales).to(x2d.dtype)
    if impl == "triton":
        from .kernels.codebook import (
            dequant_gemm_triton,
            dequantize_triton,
            psumbook_matmul_triton,
            psumbook_splitk_triton,
        )

        if backend == "psumbook":
            return psumbook_matmul_triton(x2d, codes, codebooks, scales)
        if backend == "psumbook_splitk":
            return psumbook_splitk_triton(x2d, codes, codebooks, scales)
        if backend == "dequant":
            weight = dequantize_triton(codes, codebooks, scales, dtype=x2d.dtype)
            return torch.matmul(x2d, weight.t())
        return dequant_gemm_triton(x2d, codes, codebooks, scales)  # "dequant_fused"
    if backend == "psumbook":
        if plan is None:
            plan = make_plan(codes, shape.codebook_size, shape.vector_size, shape.group_size)
        return psumbook_matmul(x2d, codebooks, scales, plan).to(x2d.dtype)
    index = None if plan is None else plan.rebuild
    return dequant_matmul(x2d, codes, codebooks, scales, index=index).to(x2d.dtype)


class _CodebookMatmul(torch.autograd.Function):
    """y = x Ŵᵀ with dx = dy Ŵ; codes, codebooks and scales get no gradient."""

    @staticmethod
    def forward(ctx, x2d, codes, codebooks, scales, run):
        ctx.save_for_backward(codes, codebooks, scales)
        return run(x2d)

    @staticmethod
    def backward(ctx, grad):
        codes, codebooks, scales = ctx.saved_tensors
        dtype = torch.float64 if grad.dtype == torch.float64 else torch.float32
        weight = dequantize(codes, codebooks, scales, dtype)
        return (grad.to(dtype) @ weight).to(grad.dtype), None, None, None, None


def codebook_matmul(
    x: torch.Tensor,
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    backend: str = "auto",
    impl: str = "auto",
    plan: PsumbookPlan | None = None,
    validate: bool = True,
    layout: CpuLayout | None = None,
) -> torch.Tensor:
    """``y = x Ŵᵀ`` for a codebook-quantized weight ``Ŵ[r, jv:(j+1)v] = s[r, jv//g] Σ_k B_k[codes[r,j,k]]``.

    Args:
        x: activations ``[..., K]``, float32/float16/bfloat16 (float64 on the torch paths).
        codes: uint8 ``[M, K/v, m]``.
        codebooks: ``[m, C, v]``, C = 2^b <= 256.
        scales: ``[M, K/g]``; g, v, m, C are inferred from the shapes and cross-checked.
        backend: the algorithm: ``"psumbook"`` (the method: per K-tile table of centroid ×
            activation inner products, then code-indexed gather-accumulate, scaled per group),
            ``"psumbook_splitk"`` (Triton only: the fused split-K kernel of the official CUDA
            code, atomics, non-deterministic summation order), ``"dequant"`` (the baseline:
            rebuild Ŵ, then GEMM), ``"dequant_fused"`` (Triton only: Ŵ tiles rebuilt in
            registers inside the GEMM), ``"reference"`` (float64
            dequantize then matmul), or ``"auto"`` (psumbook up to ``AUTO_CROSSOVER[device]``
            tokens, dequant beyond).
        impl: ``"triton"`` (CUDA, or CPU under ``TRITON_INTERPRET=1``), ``"numba"`` (the CPU
            Psumbook kernel of :mod:`codegemm.cpu`, the ``cpu`` extra; float32/16/bf16, computes
            in float32, ``torch.get_num_threads()`` threads), ``"torch"``, or ``"auto"`` (Triton
            on CUDA tensors; numba for CPU psumbook of at most ``NUMBA_MAX_TOKENS`` tokens when
            numba is installed and x is not float64; torch otherwise).
        plan: a cached :class:`~codegemm.psumbook.PsumbookPlan` of these codes (torch paths).
        validate: check shapes, dtypes, devices and code ranges (one pass over the codes).
        layout: a cached :class:`~codegemm.cpu.CpuLayout` of this weight (numba path; derived
            here when None).

    Returns:
        ``y [..., M]`` in x's dtype. Gradients flow to x only (``dx = dy Ŵ``).

    Example:
        >>> import torch, codegemm
        >>> codes = torch.randint(0, 256, (6, 32, 2), dtype=torch.uint8)
        >>> books, scales = torch.randn(2, 256, 8), torch.rand(6, 2)
        >>> y = codegemm.codebook_matmul(
        ...     torch.randn(3, 256), codes, books, scales, backend="psumbook"
        ... )
        >>> y.shape
        torch.Size([3, 6])
    """
    if validate:
        shape = check_format(codes, codebooks, scales)
        _check_x(x, shape.in_features, codes.device)
    else:
        rows, num_vectors, m = codes.shape
        from .format import CodebookShape

        v = codebooks.shape[2]
        shape = CodebookShape(
            rows, num_vectors * v, m, codebooks.shape[1], v, num_vectors * v // scales.shape[1]
        )
    lead = x.shape[:-1]
    x2d = x.reshape(-1, shape.in_features)
    if backend in ("dequant_fused", "psumbook_splitk"):
        if impl not in IMPLS:
            raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
        if impl == "torch" or (impl == "auto" and not use_triton_for(x2d)):
            raise ValueError(
                f"backend: {backend!r} exists only as a Triton kernel; pass impl='triton' or CUDA tensors"
            )
        if x2d.dtype == torch.float64:
            raise TypeError(
                "x: the Triton kernels take float32/float16/bfloat16, got torch.float64"
            )
        resolved, impl = backend, "triton"
    else:
        resolved, impl = _resolve(backend, impl, x2d)

    def run(inp: torch.Tensor) -> torch.Tensor:
        return _forward(inp, codes, codebooks, scales, resolved, impl, plan, shape, layout)

    if x2d.shape[0] == 0:
        y = x2d.new_zeros(0, shape.out_features)
    elif torch.is_grad_enabled() and x2d.requires_grad:
        y = _CodebookMatmul.apply(x2d, codes, codebooks, scales, run)
    else:
        y = run(x2d)
    return y.reshape(*lead, shape.out_features)


def dequantize_weight(
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``Ŵ [M, K]`` in ``dtype`` (checked inputs; torch implementation)."""
    check_format(codes, codebooks, scales)
    return dequantize(codes, codebooks, scales, dtype)
