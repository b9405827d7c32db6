"""The CPU Psumbook kernel (numba; the ``cpu`` extra): lookup table per input group, uint8 codes streamed.

Layout (:class:`CpuLayout`, derived once from the stored format and cached by ``CodebookLinear``):
the output rows are cut into tiles of :data:`ROW_TILE` rows and each tile's codes are stored
contiguously, uint8 ``[M/R, K/v, m, R]`` (tile, input group, codebook, row), so that a tile reads
one sequential stream of bytes; scales float32 ``[M/R, K/g, R]``. M is padded to a whole tile
with code 0 and scale 0 (those rows are computed and dropped). The kernel:

1. builds the table ``T[j, k, c, n] = ⟨x[n, jv:(j+1)v], B_k[c]⟩`` once per call with one torch
   GEMM (``[N·K/v, v] × [v, m·C]``; ``m·C`` floats per input group and token: 2 KiB for m2v8);
2. per tile and input group ``j`` adds ``Σ_k T[j, k, codes[b, j, k, r], n]`` into a per-group
   partial sum for the tile's ``R`` rows: the table row (2 KiB) and the partial sums (1 KiB at
   N = 1, 16 KiB at N = 16) stay in L1 while the codes stream past at one byte each;
3. multiplies each partial by its scale once per (row, scale group, token).

At N = 1 the inner loop is one scalar table load per code (the ``R`` rows' codes of one codebook
are adjacent, so the codes load as vectors); at N > 1 the table is laid out ``[J, m, C, w]`` for a
compile-time token block ``w`` (:data:`TOKEN_BLOCKS`) so that one code fetches ``w`` contiguous
table entries (one vector load for w = 16).

Accumulation is float32 (the table is float32), compiled with ``fastmath``. Threads: one thread
runs a serial build of the kernel (no parallel runtime); with ``torch.get_num_threads() > 1`` the
tiles are split over ``numba.prange`` in a parallel build, under ``numba.set_num_threads`` (capped
at ``NUMBA_NUM_THREADS``; numba's previous setting is restored afterwards).

Importing this module does not import numba; :func:`numba_available` says whether it is installed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from neurips25_core.cpu import (
    njit_kernel,
    numba_available,
    numba_parallel,
    numba_threads,
    row_tiles,
)

__all__ = ["ROW_TILE", "CpuLayout", "cpu_layout", "numba_available", "psumbook_cpu"]

#: Output rows per tile (the unit of the code layout and of the parallel split).
ROW_TILE = 256
#: Token widths the batched kernel is compiled for; larger N runs in chunks of the largest.
TOKEN_BLOCKS = (2, 4, 8, 16)


@dataclasses.dataclass
class CpuLayout:
    """The CPU kernel's copy of a codebook weight (derived from the stored format, never saved).

    Attributes:
        codes: uint8 numpy ``[M_pad/R, K/v, m, R]`` (C-contiguous; R = :data:`ROW_TILE`).
        codebooks: float32 torch ``[m·C, v]``.
        scales: float32 numpy ``[M_pad/R, K/g, R]``.
        vectors_per_group: g / v.
        rows: M (the rows past M in the last tile are padding).
    """

    codes: np.ndarray
    codebooks: torch.Tensor
    scales: np.ndarray
    vectors_per_group: int
    rows: int

    @property
    def nbytes(self) -> int:
        """Bytes of weight the kernel reads per call (codes, scales, codebooks; padding excluded)."""
        _, num_vectors, m, _ = self.codes.shape
        groups = self.scales.shape[1]
        return self.rows * (num_vectors * m + groups * 4) + self.codebooks.numel() * 4


def cpu_layout(codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor) -> CpuLayout:
    """Derive the :class:`CpuLayout` of (codes ``[M, K/v, m]``, codebooks ``[m, C, v]``, scales ``[M, K/g]``)."""
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    groups = scales.shape[1]
    return CpuLayout(
        # [M, J, m] -> [tiles, J, m, R], padded with code 0 / scale 0
        codes=row_tiles(codes.detach().to(torch.uint8), ROW_TILE),
        codebooks=codebooks.detach().cpu().float().reshape(m * size, v).contiguous(),
        scales=row_tiles(scales.detach().float(), ROW_TILE),
        vectors_per_group=num_vectors // groups,
        rows=rows,
    )


def _gemv_source():
    import numba

    R = ROW_TILE

    def gemv(lut, codes, scales, per_group, out):  # pragma: no cover - compiled
        # lut [J, m, C]; codes [T, J, m, R]; scales [T, G, R]; out [T·R]
        tiles, _, m, _ = codes.shape
        groups = scales.shape[1]
        for b in numba.prange(tiles):
            cb = codes[b]
            sb = scales[b]
            acc = np.zeros(R, np.float32)
            part = np.empty(R, np.float32)
            for gi in range(groups):
                part[:] = 0
                for j in range(gi * per_group, (gi + 1) * per_group):
                    if m == 1:
                        t0 = lut[j, 0]
                        c0 = cb[j, 0]
                        for r in range(R):
                            part[r] += t0[c0[r]]
                    elif m == 2:
                        t0 = lut[j, 0]
                        t1 = lut[j, 1]
                        c0 = cb[j, 0]
                        c1 = cb[j, 1]
                        for r in range(R):
                            part[r] += t0[c0[r]] + t1[c1[r]]
                    else:
                        for k in range(m):
                            tk = lut[j, k]
                            ck = cb[j, k]
                            for r in range(R):
                                part[r] += tk[ck[r]]
                s = sb[gi]
                for r in range(R):
                    acc[r] += part[r] * s[r]
            out[b * R : (b + 1) * R] = acc

    return gemv


def _gemm_source(width: int):
    import numba

    R = ROW_TILE
    W = width

    def gemm(lut, codes, scales, per_group, per_block, out):  # pragma: no cover - compiled
        # lut [J, m, C, W]; codes [T, J, m, R]; scales [T, G, R]; out [T·R, W]
        tiles, _, m, _ = codes.shape
        groups = scales.shape[1]
        blocks = (tiles + per_block - 1) // per_block
        for bb in numba.prange(blocks):
            b0 = bb * per_block
            nb = min(tiles, b0 + per_block) - b0
            acc = np.zeros((nb, R, W), np.float32)
            part = np.empty((nb, R, W), np.float32)
            for gi in range(groups):
                part[:] = 0
                for j in range(gi * per_group, (gi + 1) * per_group):
                    for k in range(m):
                        tk = lut[j, k]
                        for i in range(nb):
                            ck = codes[b0 + i, j, k]
                            pi = part[i]
                            for r in range(R):
                                row = tk[ck[r]]
                                for t in range(W):
                                    pi[r, t] += row[t]
                for i in range(nb):
                    s = scales[b0 + i, gi]
                    for r in range(R):
                        for t in range(W):
                            acc[i, r, t] += part[i, r, t] * s[r]
            out[b0 * R : (b0 + nb) * R] = acc.reshape(nb * R, W)

    return gemm


def _small_source():
    import numba

    R = ROW_TILE

    def small(lut, codes, scales, per_group, out):  # pragma: no cover - compiled
        # lut [J, m, N, C]; codes [T, J, m, R]; scales [T, G, R]; out [N, T·R]
        tiles, _, m, _ = codes.shape
        n = lut.shape[2]
        groups = scales.shape[1]
        for b in numba.prange(tiles):
            cb = codes[b]
            sb = scales[b]
            acc = np.zeros((n, R), np.float32)
            part = np.empty((n, R), np.float32)
            for gi in range(groups):
                part[:] = 0
                for j in range(gi * per_group, (gi + 1) * per_group):
                    for k in range(m):
                        ck = cb[j, k]
                        for t in range(n):
                            tt = lut[j, k, t]
                            pt = part[t]
                            for r in range(R):
                                pt[r] += tt[ck[r]]
                s = sb[gi]
                for t in range(n):
                    for r in range(R):
                        acc[t, r] += part[t, r] * s[r]
            out[:, b * R : (b + 1) * R] = acc

    return small


#: Up to this many tokens the kernel loops tokens inside each code (a GEMV per token sharing the
#: code stream); beyond, it runs the token-blocked kernel.
SMALL_N = 4


#: Bytes of partial and running sums a batched work item keeps (sized for a core's L2).
BLOCK_BYTES = 256 << 10


def _compiled(width: int, parallel: bool):
    """The kernel for a token width (1: the GEMV, 0: the small-N loop) and a build (serial or ``prange``-parallel)."""
    if width == 0:
        return njit_kernel(_small_source, parallel=parallel)
    if width == 1:
        return njit_kernel(_gemv_source, parallel=parallel)
    return njit_kernel(_gemm_source, width, parallel=parallel)


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
    n, k = x.shape
    tiles, num_vectors, m, _ = layout.codes.shape
    rows = layout.rows
    v = k // num_vectors
    x = x.detach().to(torch.float32)
    if out is None:
        out = torch.empty(n, rows, dtype=torch.float32)
    elif out.shape != (n, rows) or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError(
            f"out: expected contiguous float32 {(n, rows)}, got {out.dtype} {tuple(out.shape)}"
        )
    with numba_parallel() as parallel:
        if n == 1:
            # [K/v, v] @ [v, m·C] -> [K/v, m, C]
            lut = (x.reshape(num_vectors, v) @ layout.codebooks.t()).view(
                1, num_vectors, m, codebook_size
            )
            res = np.full(tiles * ROW_TILE, np.nan, np.float32)
            _compiled(1, parallel)(
                lut[0].numpy(), layout.codes, layout.scales, layout.vectors_per_group, res
            )
            out[0] = torch.from_numpy(res[:rows])
            return out
        if n <= SMALL_N:
            # [K/v, v] @ [v, m·C] -> [K/v, m, N, C]
            lut = (x.view(n, num_vectors, v) @ layout.codebooks.t()).view(
                n, num_vectors, m, codebook_size
            )
            res = np.full((n, tiles * ROW_TILE), np.nan, np.float32)
            _compiled(0, parallel)(
                np.ascontiguousarray(lut.permute(1, 2, 0, 3).numpy()),
                layout.codes, layout.scales, layout.vectors_per_group, res,
            )  # fmt: skip
            out.copy_(torch.from_numpy(res[:, :rows]))
            return out
        width = next((w for w in TOKEN_BLOCKS if w >= n), TOKEN_BLOCKS[-1])
        gemm = _compiled(width, parallel)
        # row tiles per work item: the table is read once per item, the sums stay in L2
        threads = numba_threads() if parallel else 1
        per_block = max(1, min(BLOCK_BYTES // (8 * ROW_TILE * width), -(-tiles // threads)))
        chunks = -(-n // width)
        xp = torch.zeros(chunks * width, k, dtype=torch.float32)
        xp[:n] = x
        # [m·C, v] @ [chunks, J, v, w] -> [chunks, J, m·C, w]: the table in kernel order
        xb = xp.view(chunks, width, num_vectors, v).permute(0, 2, 3, 1)
        lut = torch.matmul(layout.codebooks, xb).view(chunks, num_vectors, m, codebook_size, width)
        for c in range(chunks):
            res = np.full((tiles * ROW_TILE, width), np.nan, np.float32)
            gemm(lut[c].numpy(), layout.codes, layout.scales, layout.vectors_per_group,
                 per_block, res)  # fmt: skip
            n0, n1 = c * width, min(n, (c + 1) * width)
            out[n0:n1] = torch.from_numpy(res[:rows, : n1 - n0].T)
    return out
