"""The CPU packed matmul (numba; the ``cpu`` extra): byte lookup tables over the packed codes.

Layout (:class:`CpuLayout`, derived once from the stored int32 planes and cached by
``PackedLinear``): each plane of ``b_p`` bits is re-packed into bytes of ``t = 8/b_p`` consecutive
codes (``k = t·j + i`` at bit ``i·b_p`` of byte ``j``), stored uint8 ``[K_pad/t, M]`` (byte index
outermost). Per call and plane, one torch GEMM builds the table
``T_p[j, β, n] = f_p Σ_i x[n, t·j + i]·(field_i(β) − z_p)`` (256 entries per byte position: the
sum over a byte's ``t`` weights, offset applied), then the kernel adds ``T_p[j, bytes[j, r], n]``
over ``j`` (outer loop, so table row ``j`` stays in L1) and the rows of the thread's block (inner
loop); the per-row scale is applied once at the end. One lookup covers 8/b_p weights: 4 at 2 bits,
8 at 1 bit, 2 at 4 bits. Padded codes meet zero activations.

Accumulation is float32. Threads: ``torch.get_num_threads()`` (``numba.set_num_threads`` inside
a context, capped at ``NUMBA_NUM_THREADS``; numba's setting is restored afterwards). Importing this
module does not import numba.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util

import numpy as np
import torch

__all__ = ["CpuLayout", "cpu_layout", "numba_available", "packed_matmul_cpu"]

#: Output rows per parallel work item.
ROW_BLOCK = 256
#: Token widths the batched kernel is compiled for; larger N runs in chunks of the largest.
TOKEN_BLOCKS = (2, 4, 8, 16)


def numba_available() -> bool:
    """Whether numba (the ``cpu`` extra) is importable."""
    return importlib.util.find_spec("numba") is not None


@dataclasses.dataclass
class CpuLayout:
    """The CPU kernel's copy of a packed weight (derived from the planes, never saved).

    Attributes:
        planes: per plane, uint8 numpy ``[K_pad/t, M]`` bytes of ``t = 8/b_p`` codes.
        tables: per plane, float32 ``[256, t]``: ``f_p·(field_i(β) − z_p)``.
        scale: float32 ``(M,)``.
    """

    planes: list[np.ndarray]
    tables: list[torch.Tensor]
    scale: torch.Tensor

    @property
    def nbytes(self) -> int:
        """Bytes the kernel reads per call besides x and y (codes and scales)."""
        return sum(p.nbytes for p in self.planes) + self.scale.numel() * 4


def cpu_layout(planes: list[torch.Tensor], scale: torch.Tensor, bits: float) -> CpuLayout:
    """Derive the :class:`CpuLayout` from int32 planes (:mod:`paretoq.packing`) and the row scale."""
    from paretoq.packing import plane_specs, unpack_codes

    out_planes, tables = [], []
    for (pb, z, f), words in zip(plane_specs(bits), planes):
        t = 8 // pb
        codes = unpack_codes(words.detach().cpu(), pb)  # [M, K_pad], code order k
        rows, kp = codes.shape
        shifts = torch.arange(t, dtype=torch.int64) * pb
        packed = (codes.view(rows, kp // t, t) << shifts).sum(dim=-1).to(torch.uint8)
        out_planes.append(np.ascontiguousarray(packed.t().numpy()))
        beta = torch.arange(256, dtype=torch.int64)[:, None]
        fields = ((beta >> shifts) & ((1 << pb) - 1)).to(torch.float32)
        tables.append((f * (fields - z)).contiguous())
    return CpuLayout(out_planes, tables, scale.detach().cpu().float().reshape(-1).contiguous())


@functools.cache
def _gemv():
    import numba

    @numba.njit(parallel=True, cache=True, nogil=True)
    def gemv(lut, codes, out, first):  # pragma: no cover - compiled
        # lut [J, 256]; codes [J, M]; out [M] (accumulated into)
        num_bytes, rows = codes.shape
        blocks = (rows + ROW_BLOCK - 1) // ROW_BLOCK
        for b in numba.prange(blocks):
            r0 = b * ROW_BLOCK
            r1 = min(rows, r0 + ROW_BLOCK)
            acc = np.zeros(r1 - r0, np.float32)
            for j in range(num_bytes):
                table = lut[j]
                block = codes[j]
                for r in range(r0, r1):
                    acc[r - r0] += table[block[r]]
            for r in range(r0, r1):
                if first:
                    out[r] = acc[r - r0]
                else:
                    out[r] += acc[r - r0]

    return numba, gemv


@functools.cache
def _gemm(width: int):
    import numba

    @numba.njit(parallel=True, cache=True, nogil=True)
    def gemm(lut, codes, out, first):  # pragma: no cover - compiled
        # lut [J, 256, width]; codes [J, M]; out [M, width] (accumulated into)
        num_bytes, rows = codes.shape
        blocks = (rows + ROW_BLOCK - 1) // ROW_BLOCK
        for b in numba.prange(blocks):
            r0 = b * ROW_BLOCK
            r1 = min(rows, r0 + ROW_BLOCK)
            acc = np.zeros((r1 - r0, width), np.float32)
            for j in range(num_bytes):
                table = lut[j]
                block = codes[j]
                for r in range(r0, r1):
                    c = block[r]
                    for t in range(width):
                        acc[r - r0, t] += table[c, t]
            for r in range(r0, r1):
                for t in range(width):
                    if first:
                        out[r, t] = acc[r - r0, t]
                    else:
                        out[r, t] += acc[r - r0, t]

    return gemm


@contextlib.contextmanager
def _threads(numba):
    want = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    old = numba.get_num_threads()
    numba.set_num_threads(want)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def packed_matmul_cpu(
    x: torch.Tensor, layout: CpuLayout, scratch: np.ndarray | None = None
) -> torch.Tensor:
    """``s ⊙ (x·(C − z)ᵀ)``: x ``[N, K]`` -> float32 ``[N, M]`` (needs numba; no bias).

    ``scratch`` (tests): the float32 ``[M]`` (N = 1) or ``[M, ceil(N/w)·w]`` buffer the kernel
    writes, e.g. NaN-filled to show that every entry is written.

    Example:
        >>> import torch, paretoq
        >>> from paretoq.cpu import cpu_layout, numba_available, packed_matmul_cpu
        >>> q = paretoq.QuantLinear.from_linear(torch.nn.Linear(40, 3, bias=False), bits=2)
        >>> p = paretoq.PackedLinear.from_quant_linear(q)
        >>> x = torch.randn(2, 40)
        >>> if numba_available():
        ...     y = packed_matmul_cpu(x, cpu_layout(p.planes, p.scale, 2))
        ...     assert torch.allclose(y, x @ p.dequantize().T, atol=1e-5)
    """
    numba, gemv = _gemv()
    n, k = x.shape
    rows = layout.scale.shape[0]
    x = x.detach().to(torch.float32)
    with _threads(numba):
        width = 1 if n == 1 else next((w for w in TOKEN_BLOCKS if w >= n), TOKEN_BLOCKS[-1])
        shape = (rows,) if n == 1 else (rows, -(-n // width) * width)
        out = np.empty(shape, np.float32) if scratch is None else scratch
        if out.shape != shape or out.dtype != np.float32:
            raise ValueError(f"scratch: expected float32 {shape}, got {out.dtype} {out.shape}")
        if n > 1:
            gemm = _gemm(width)
        for p, (codes, table) in enumerate(zip(layout.planes, layout.tables)):
            num_bytes = codes.shape[0]
            t = table.shape[1]
            xp = torch.zeros(n, num_bytes * t, dtype=torch.float32)
            xp[:, :k] = x
            lut = xp.view(n, num_bytes, t) @ table.t()  # [N, J, 256]
            if n == 1:
                gemv(lut[0].numpy(), codes, out, p == 0)
                continue
            for n0 in range(0, n, width):
                n1 = min(n, n0 + width)
                chunk = np.zeros((num_bytes, 256, width), np.float32)
                chunk[..., : n1 - n0] = lut[n0:n1].permute(1, 2, 0).numpy()
                gemm(chunk, codes, out[:, n0 : n0 + width], p == 0)
    y = torch.from_numpy(out).view(rows, -1)[:, :n].t()
    return y * layout.scale
