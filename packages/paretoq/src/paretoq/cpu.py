"""The CPU packed matmul (numba; the ``cpu`` extra): byte lookup tables over the packed codes.

Layout (:class:`CpuLayout`, derived once from the stored int32 planes and cached by
``PackedLinear``): each plane of ``b_p`` bits is re-packed into bytes of ``t = 8/b_p`` consecutive
codes (``k = t·j + i`` at bit ``i·b_p`` of byte ``j``); the output rows are cut into tiles of
:data:`ROW_TILE` rows and each tile's bytes are stored contiguously, uint8 ``[M_pad/R, K_pad/t, R]``
(tile, byte index, row), so that a tile reads one sequential stream of bytes. M is padded to a
whole tile (those rows are computed and dropped). Per call and plane, one torch GEMM builds the
table ``T_p[j, β, n] = f_p Σ_i x[n, t·j + i]·(field_i(β) − z_p)`` (256 entries per byte position:
the sum over a byte's ``t`` weights, offset applied), then per tile the kernel adds
``T_p[j, bytes[b, j, r], n]`` over ``j`` (outer loop, four byte positions per pass, so that their
table rows, 4 KiB at N = 1, stay in L1 while the codes stream past) into the tile's ``R`` partial
sums; the per-row scale is applied once at the end. One lookup covers 8/b_p weights: 4 at 2 bits,
8 at 1 bit, 2 at 4 bits. Padded codes meet zero activations.

At N > 1 the table is laid out ``[J, 256, w]`` for a compile-time token block ``w``
(:data:`TOKEN_BLOCKS`), so that one byte fetches ``w`` contiguous table entries.

Accumulation is float32, compiled with ``fastmath``. Threads: one thread runs a serial build of the
kernel (no parallel runtime); with ``torch.get_num_threads() > 1`` the tiles are split over
``numba.prange`` in a parallel build, under ``numba.set_num_threads`` (capped at
``NUMBA_NUM_THREADS``; numba's previous setting is restored afterwards). Importing this module
does not import numba.
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

__all__ = ["ROW_TILE", "CpuLayout", "cpu_layout", "numba_available", "packed_matmul_cpu"]

#: Output rows per tile (the unit of the code layout and of the parallel split).
ROW_TILE = 256
#: Token widths the batched kernel is compiled for; larger N runs in chunks of the largest.
TOKEN_BLOCKS = (2, 4, 8, 16)


@dataclasses.dataclass
class CpuLayout:
    """The CPU kernel's copy of a packed weight (derived from the planes, never saved).

    Attributes:
        planes: per plane, uint8 numpy ``[M_pad/R, K_pad/t, R]``: bytes of ``t = 8/b_p`` codes,
            row tiles of R = :data:`ROW_TILE`.
        tables: per plane, float32 ``[256, t]``: ``f_p·(field_i(β) − z_p)``.
        scale: float32 ``(M,)``.
    """

    planes: list[np.ndarray]
    tables: list[torch.Tensor]
    scale: torch.Tensor

    @property
    def rows(self) -> int:
        """M (the rows past M in the last tile are padding)."""
        return self.scale.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes the kernel reads per call besides x and y (codes and scales; padding excluded)."""
        return sum(p.shape[1] for p in self.planes) * self.rows + self.rows * 4


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
        out_planes.append(row_tiles(packed, ROW_TILE))  # [M, J] -> [tiles, J, R], zero-padded
        beta = torch.arange(256, dtype=torch.int64)[:, None]
        fields = ((beta >> shifts) & ((1 << pb) - 1)).to(torch.float32)
        tables.append((f * (fields - z)).contiguous())
    return CpuLayout(out_planes, tables, scale.detach().cpu().float().reshape(-1).contiguous())


def _gemv_source():
    import numba

    R = ROW_TILE

    def gemv(lut, codes, out, first):  # pragma: no cover - compiled
        # lut [J, 256]; codes [T, J, R]; out [T·R] (written when first, else accumulated into)
        tiles, num_bytes, _ = codes.shape
        quads = num_bytes // 4
        for b in numba.prange(tiles):
            cb = codes[b]
            acc = np.zeros(R, np.float32)
            for q in range(quads):
                j = 4 * q
                t0, t1, t2, t3 = lut[j], lut[j + 1], lut[j + 2], lut[j + 3]
                c0, c1, c2, c3 = cb[j], cb[j + 1], cb[j + 2], cb[j + 3]
                for r in range(R):
                    acc[r] += (t0[c0[r]] + t1[c1[r]]) + (t2[c2[r]] + t3[c3[r]])
            for j in range(4 * quads, num_bytes):
                tj = lut[j]
                cj = cb[j]
                for r in range(R):
                    acc[r] += tj[cj[r]]
            o = out[b * R : (b + 1) * R]
            if first:
                o[:] = acc
            else:
                o += acc

    return gemv


def _small_source():
    import numba

    R = ROW_TILE

    def small(lut, codes, out, first):  # pragma: no cover - compiled
        # lut [J, N, 256]; codes [T, J, R]; out [N, T·R] (written when first, else accumulated)
        tiles, num_bytes, _ = codes.shape
        n = lut.shape[1]
        for b in numba.prange(tiles):
            cb = codes[b]
            acc = np.zeros((n, R), np.float32)
            for j in range(num_bytes):
                cj = cb[j]
                for t in range(n):
                    tt = lut[j, t]
                    at = acc[t]
                    for r in range(R):
                        at[r] += tt[cj[r]]
            o = out[:, b * R : (b + 1) * R]
            if first:
                o[:] = acc
            else:
                o += acc

    return small


def _gemm_source(width: int):
    import numba

    R = ROW_TILE
    W = width

    def gemm(lut, codes, per_block, out, first):  # pragma: no cover - compiled
        # lut [J, 256, W]; codes [T, J, R]; out [T·R, W] (written when first, else accumulated)
        tiles, num_bytes, _ = codes.shape
        blocks = (tiles + per_block - 1) // per_block
        for bb in numba.prange(blocks):
            b0 = bb * per_block
            nb = min(tiles, b0 + per_block) - b0
            acc = np.zeros((nb, R, W), np.float32)
            for j in range(num_bytes):
                tj = lut[j]
                for i in range(nb):
                    cj = codes[b0 + i, j]
                    ai = acc[i]
                    for r in range(R):
                        row = tj[cj[r]]
                        for t in range(W):
                            ai[r, t] += row[t]
            o = out[b0 * R : (b0 + nb) * R]
            if first:
                o[:] = acc.reshape(nb * R, W)
            else:
                o += acc.reshape(nb * R, W)

    return gemm


#: Up to this many tokens the kernel loops tokens inside each code byte (a GEMV per token sharing
#: the code stream); beyond, it runs the token-blocked kernel.
SMALL_N = 4
#: Bytes of running sums a batched work item keeps (sized for a core's L2).
BLOCK_BYTES = 256 << 10


def _compiled(width: int, parallel: bool):
    """The kernel for a token width (1: the GEMV, 0: the small-N loop) and a build (serial or ``prange``-parallel)."""
    if width == 0:
        return njit_kernel(_small_source, parallel=parallel)
    if width == 1:
        return njit_kernel(_gemv_source, parallel=parallel)
    return njit_kernel(_gemm_source, width, parallel=parallel)


def packed_matmul_cpu(
    x: torch.Tensor, layout: CpuLayout, scratch: np.ndarray | None = None
) -> torch.Tensor:
    """``s ⊙ (x·(C − z)ᵀ)``: x ``[N, K]`` -> float32 ``[N, M]`` (needs numba; no bias).

    ``scratch`` (tests): the float32 ``[M_pad]`` (N = 1), ``[N, M_pad]`` (N ≤ :data:`SMALL_N`) or
    ``[ceil(N/w), M_pad, w]`` buffer the kernel writes (M_pad: M rounded up to :data:`ROW_TILE`),
    e.g. NaN-filled to show that every entry is written.

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
    n, k = x.shape
    rows = layout.rows
    padded = layout.planes[0].shape[0] * ROW_TILE
    x = x.detach().to(torch.float32)
    if n == 1:
        width, chunks, shape = 1, 1, (padded,)
    elif n <= SMALL_N:
        width, chunks, shape = 0, 1, (n, padded)
    else:
        width = next((w for w in TOKEN_BLOCKS if w >= n), TOKEN_BLOCKS[-1])
        chunks = -(-n // width)
        shape = (chunks, padded, width)
    out = np.empty(shape, np.float32) if scratch is None else scratch
    if out.shape != shape or out.dtype != np.float32:
        raise ValueError(f"scratch: expected float32 {shape}, got {out.dtype} {out.shape}")
    with numba_parallel() as parallel:
        kernel = _compiled(width, parallel)
        tiles = layout.planes[0].shape[0]
        threads = numba_threads() if parallel else 1
        per_block = max(1, min(BLOCK_BYTES // (4 * ROW_TILE * max(width, 1)), -(-tiles // threads)))
        for p, (codes, table) in enumerate(zip(layout.planes, layout.tables)):
            num_bytes = codes.shape[1]
            t = table.shape[1]
            # x padded to whole bytes (and to whole token blocks): [tokens, J·t]
            xp = torch.zeros(max(n, chunks * width), num_bytes * t, dtype=torch.float32)
            xp[:n, :k] = x
            if n == 1:
                lut = xp.view(num_bytes, t) @ table.t()  # [J, 256]
                kernel(lut.numpy(), codes, out, p == 0)
            elif width == 0:
                # [J, N, t] @ [t, 256] -> [J, N, 256]
                lut = xp.view(n, num_bytes, t).transpose(0, 1) @ table.t()
                kernel(lut.contiguous().numpy(), codes, out, p == 0)
            else:
                # [chunks, J, t, w] -> table [256, t] @ -> [chunks, J, 256, w]
                xb = xp.view(chunks, width, num_bytes, t).permute(0, 2, 3, 1)
                lut = torch.matmul(table, xb).contiguous()
                for c in range(chunks):
                    kernel(lut[c].numpy(), codes, per_block, out[c], p == 0)
    if n == 1:
        y = torch.from_numpy(out[:rows]).view(1, rows)
    elif width == 0:
        y = torch.from_numpy(out[:, :rows])
    else:
        y = torch.from_numpy(out).permute(0, 2, 1).reshape(chunks * width, padded)[:n, :rows]
    return y * layout.scale
