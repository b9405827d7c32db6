"""The CPU Psumbook kernel (numba; the ``cpu`` extra): lookup table per input group, uint8 codes streamed.

Layout (:class:`CpuLayout`, derived once from the stored format and cached by ``CodebookLinear``):
codes uint8 ``[K/v, M, m]`` (the input-group index outermost, as AQLM's CPU kernel), scales
float32 ``[K/g, M]``. The kernel:

1. builds the table ``T[j, k, c, n] = ⟨x[n, jv:(j+1)v], B_k[c]⟩`` with one torch GEMM
   (``[N·K/v, v] × [v, m·C]``; ``m·C·N`` floats per input group, 2 KiB for m2v8 at N = 1);
2. for each input group ``j`` (outer loop) and each output row of the thread's block (inner loop)
   adds ``Σ_k T[j, k, codes[j, r, k], n]`` into a per-group partial sum, so that table row ``j``
   stays in L1 while the codes stream past at one byte each;
3. multiplies each partial by its scale once per (row, scale group, token).

Accumulation is float32 (the table is float32). Threads: the row blocks are split over
``numba.prange``; :func:`psumbook_cpu` runs under ``torch.get_num_threads()`` threads
(``numba.set_num_threads`` inside a context, capped at numba's own pool size,
``NUMBA_NUM_THREADS``) and restores numba's previous setting afterwards.

Importing this module does not import numba; :func:`numba_available` says whether it is installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util

import numpy as np
import torch

__all__ = ["CpuLayout", "cpu_layout", "numba_available", "psumbook_cpu"]

#: Output rows per parallel work item.
ROW_BLOCK = 256


def numba_available() -> bool:
    """Whether numba (the ``cpu`` extra) is importable."""
    return importlib.util.find_spec("numba") is not None


@dataclasses.dataclass
class CpuLayout:
    """The CPU kernel's copy of a codebook weight (derived from the stored format, never saved).

    Attributes:
        codes: uint8 numpy ``[K/v, M, m]`` (C-contiguous).
        codebooks: float32 torch ``[m·C, v]``.
        scales: float32 numpy ``[K/g, M]``.
        vectors_per_group: g / v.
    """

    codes: np.ndarray
    codebooks: torch.Tensor
    scales: np.ndarray
    vectors_per_group: int

    @property
    def nbytes(self) -> int:
        """Bytes the kernel reads per call besides x and y: codes, scales, codebooks."""
        return self.codes.nbytes + self.scales.nbytes + self.codebooks.numel() * 4


def cpu_layout(codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor) -> CpuLayout:
    """Derive the :class:`CpuLayout` of (codes ``[M, K/v, m]``, codebooks ``[m, C, v]``, scales ``[M, K/g]``)."""
    _, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    groups = scales.shape[1]
    return CpuLayout(
        codes=np.ascontiguousarray(codes.detach().cpu().permute(1, 0, 2).numpy()),
        codebooks=codebooks.detach().cpu().float().reshape(m * size, v).contiguous(),
        scales=np.ascontiguousarray(scales.detach().cpu().float().t().numpy()),
        vectors_per_group=num_vectors // groups,
    )


@functools.cache
def _kernels():
    import numba

    @numba.njit(parallel=True, cache=True, nogil=True)
    def gemv(lut, codes, scales, per_group, out):  # pragma: no cover - compiled
        # lut [J, m, C]; codes [J, M, m]; scales [G, M]; out [M]
        _, rows, m = codes.shape
        groups = scales.shape[0]
        blocks = (rows + ROW_BLOCK - 1) // ROW_BLOCK
        for b in numba.prange(blocks):
            r0 = b * ROW_BLOCK
            r1 = min(rows, r0 + ROW_BLOCK)
            acc = np.zeros(r1 - r0, np.float32)
            part = np.empty(r1 - r0, np.float32)
            for gi in range(groups):
                part[:] = 0
                for j in range(gi * per_group, (gi + 1) * per_group):
                    table = lut[j]
                    block = codes[j]
                    if m == 1:
                        for r in range(r0, r1):
                            part[r - r0] += table[0, block[r, 0]]
                    elif m == 2:
                        for r in range(r0, r1):
                            part[r - r0] += table[0, block[r, 0]] + table[1, block[r, 1]]
                    else:
                        for r in range(r0, r1):
                            s = np.float32(0)
                            for k in range(m):
                                s += table[k, block[r, k]]
                            part[r - r0] += s
                for r in range(r0, r1):
                    acc[r - r0] += part[r - r0] * scales[gi, r]
            out[r0:r1] = acc

    return numba, gemv


#: Token widths the batched kernel is compiled for; larger N runs in chunks of the largest.
TOKEN_BLOCKS = (2, 4, 8, 16)


@functools.cache
def _gemm(width: int):
    """The batched kernel for a compile-time token width (so its inner loop is unrolled)."""
    import numba

    @numba.njit(parallel=True, cache=True, nogil=True)
    def gemm(lut, codes, scales, per_group, out):  # pragma: no cover - compiled
        # lut [J, m, C, width]; codes [J, M, m]; scales [G, M]; out [M, width]
        _, rows, m = codes.shape
        groups = scales.shape[0]
        blocks = (rows + ROW_BLOCK - 1) // ROW_BLOCK
        for b in numba.prange(blocks):
            r0 = b * ROW_BLOCK
            r1 = min(rows, r0 + ROW_BLOCK)
            acc = np.zeros((r1 - r0, width), np.float32)
            part = np.empty((r1 - r0, width), np.float32)
            for gi in range(groups):
                part[:] = 0
                for j in range(gi * per_group, (gi + 1) * per_group):
                    table = lut[j]
                    block = codes[j]
                    for r in range(r0, r1):
                        for k in range(m):
                            c = block[r, k]
                            for t in range(width):
                                part[r - r0, t] += table[k, c, t]
                for r in range(r0, r1):
                    s = scales[gi, r]
                    for t in range(width):
                        acc[r - r0, t] += part[r - r0, t] * s
            out[r0:r1] = acc

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


def psumbook_cpu(
    x: torch.Tensor, layout: CpuLayout, codebook_size: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The CPU Psumbook GEMM: float32 x ``[N, K]`` -> float32 ``[N, M]`` (needs numba).

    ``out``: a contiguous float32 ``[N, M]`` tensor to write (e.g. NaN-poisoned in tests); the
    kernels' own buffers are NaN-filled too, so an entry left unwritten shows.

    Example:
        >>> import torch, codegemm
        >>> from codegemm.cpu import cpu_layout, numba_available, psumbook_cpu
        >>> codes = torch.randint(0, 256, (6, 32, 2), dtype=torch.uint8)
        >>> books, scales = torch.randn(2, 256, 8), torch.rand(6, 2)
        >>> x = torch.randn(3, 256)
        >>> if numba_available():
        ...     y = psumbook_cpu(x, cpu_layout(codes, books, scales), 256)
        ...     ref = codegemm.codebook_matmul(x, codes, books, scales, backend="reference")
        ...     assert float((y - ref).norm() / ref.norm()) < 1e-5
    """
    numba, gemv = _kernels()
    n, k = x.shape
    num_vectors, rows, m = layout.codes.shape
    v = k // num_vectors
    x = x.detach().to(torch.float32)
    # [N·K/v, v] @ [v, m·C] -> [N, K/v, m, C]
    lut = (x.reshape(n * num_vectors, v) @ layout.codebooks.t()).view(
        n, num_vectors, m, codebook_size
    )
    if out is None:
        out = torch.empty(n, rows, dtype=torch.float32)
    elif out.shape != (n, rows) or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError(
            f"out: expected contiguous float32 {(n, rows)}, got {out.dtype} {tuple(out.shape)}"
        )
    with _threads(numba):
        if n == 1:
            gemv(
                lut[0].numpy(),
                layout.codes,
                layout.scales,
                layout.vectors_per_group,
                out[0].numpy(),
            )
            return out
        width = next((w for w in TOKEN_BLOCKS if w >= n), TOKEN_BLOCKS[-1])
        gemm = _gemm(width)
        for n0 in range(0, n, width):
            n1 = min(n, n0 + width)
            chunk = np.zeros((num_vectors, m, codebook_size, width), np.float32)
            chunk[..., : n1 - n0] = lut[n0:n1].permute(1, 2, 3, 0).numpy()
            res = np.full((rows, width), np.nan, np.float32)
            gemm(chunk, layout.codes, layout.scales, layout.vectors_per_group, res)
            out[n0:n1] = torch.from_numpy(res[:, : n1 - n0].T)
    return out
