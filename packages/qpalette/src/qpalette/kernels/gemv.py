"""Triton dequant-GEMM kernels (pointer arithmetic only; fp32 accumulation, no tl.dot).

* ``lut_gemm``: NUQ (VDIM = 1) and 2-D VQ (VDIM = 2) codes stored as bit-planes, b int32 words per
  32 codes (word j holds bit j of the 32 codes), so any b works; the codebook is gathered.
* ``tcq_gemm``: trellis codes, 4·KV int32 words per 16×16 tile; every state is the circular L-bit
  window at bit offset t·KV (two words, since 128·KV is a multiple of 32), decoded in registers:
  h = s(s+1) & 0xFFFF, τ index (h >> (15-Q)) & (2**Q - 1), sign = bit 15 on coordinate 0.

Both compute y[m, n] = Σ_k Q[n, k] · x[m, k] on the *rotated* input; row scales are applied by the
caller (ops.qmatmul).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _lut_gemm_kernel(
    x_ptr, planes_ptr, cb_ptr, y_ptr, M, N, K, G,
    B: tl.constexpr, VDIM: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    m = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    lanes = tl.arange(0, 32)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for g in range(0, G):
        code = tl.zeros((BLOCK_N, 32), dtype=tl.int32)
        for j in tl.static_range(B):
            w = tl.load(planes_ptr + rows * (G * B) + g * B + j, mask=rmask, other=0)
            code += ((w[:, None] >> lanes[None, :]) & 1) << j
        for d in tl.static_range(VDIM):
            col = (g * 32 + lanes) * VDIM + d
            xv = tl.load(x_ptr + m * K + col, mask=col < K, other=0.0)
            val = tl.load(cb_ptr + code * VDIM + d, mask=rmask[:, None], other=0.0)
            acc += tl.sum(val * xv[None, :], axis=1)
    tl.store(y_ptr + m * N + rows, acc, mask=rmask)


def lut_gemm(x: torch.Tensor, planes: torch.Tensor, codebook: torch.Tensor, bits: int, vdim: int):
    """x (M, K) fp32 · Qᵀ for bit-plane codes (N, G, bits) and a (2**bits·…, vdim) codebook."""
    M, K = x.shape
    N, G, _ = planes.shape
    y = torch.empty(M, N, device=x.device, dtype=torch.float32)
    BLOCK_N = 16
    grid = (triton.cdiv(N, BLOCK_N), M)
    _lut_gemm_kernel[grid](
        x.contiguous(), planes.contiguous(), codebook.reshape(-1).contiguous().float(), y,
        M, N, K, G, B=bits, VDIM=vdim, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return y


@triton.jit
def _tcq_gemm_kernel(
    x_ptr, words_ptr, tau_ptr, y_ptr, M, N, K, x_off, x_stride,
    L: tl.constexpr, KV: tl.constexpr, Q: tl.constexpr,
):  # fmt: skip
    ti = tl.program_id(0)  # tile row (16 output rows)
    m = tl.program_id(1)
    NW: tl.constexpr = 4 * KV  # words per tile
    r = tl.arange(0, 16)[:, None]
    c = tl.arange(0, 8)[None, :]
    t = r * 8 + c  # (16, 8) pair index within the tile
    off = t * KV
    w0 = off // 32
    b0 = off % 32
    w1 = (w0 + 1) % NW
    tiles_per_row = K // 16
    acc = tl.zeros((16,), dtype=tl.float32)
    for tj in range(0, tiles_per_row):
        base = words_ptr + (ti * tiles_per_row + tj) * NW
        hi = tl.load(base + w0).to(tl.int64) & 0xFFFFFFFF
        lo = tl.load(base + w1).to(tl.int64) & 0xFFFFFFFF
        v = (hi << 32) | lo
        s = (v >> (64 - L - b0)) & ((1 << L) - 1)
        h = (s * (s + 1)) & 0xFFFF
        idx = (h >> (15 - Q)) & ((1 << Q) - 1)
        sign = 1.0 - 2.0 * ((h >> 15) & 1).to(tl.float32)
        v0 = tl.load(tau_ptr + idx * 2) * sign
        v1 = tl.load(tau_ptr + idx * 2 + 1)
        col = x_off + tj * 16 + 2 * c
        x0 = tl.load(x_ptr + m * x_stride + col)
        x1 = tl.load(x_ptr + m * x_stride + col + 1)
        acc += tl.sum(v0 * x0 + v1 * x1, axis=1)
    rows = ti * 16 + tl.arange(0, 16)
    tl.store(y_ptr + m * N + rows, acc)


def tcq_gemm(
    x: torch.Tensor, words: torch.Tensor, tau: torch.Tensor, L: int, kv: int, Q: int, n: int,
    k: int, x_offset: int = 0,
) -> torch.Tensor:  # fmt: skip
    """x[:, x_offset:x_offset+k] (M, ·) fp32 · Qᵀ for TCQ words (tiles, 4·kv) of an (n, k) block."""
    M = x.shape[0]
    x = x.contiguous()
    y = torch.empty(M, n, device=x.device, dtype=torch.float32)
    grid = (n // 16, M)
    _tcq_gemm_kernel[grid](
        x, words.contiguous(), tau.contiguous().float(), y, M, n, k, x_offset, x.shape[1],
        L=L, KV=kv, Q=Q,
    )  # fmt: skip
    return y
