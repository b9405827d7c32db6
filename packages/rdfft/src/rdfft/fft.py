"""The torch implementation of the in-place rdFFT (the CPU path).

Each stage works on the whole buffer at once: the row of length N is viewed as (N/L, L) blocks
and the four slots of every butterfly are contiguous (or reversed) slices of the blocks, so a
stage is a handful of vectorised slice reads and ``copy_`` writes, with no Python loop over rows,
blocks or butterflies. Results land in the input buffer; the temporaries a stage needs (its
slice reads) are bounded by processing rows in chunks of at most :data:`CHUNK_ELEMENTS`
elements, so the transient workspace does not grow with the number of rows.

Twiddles are computed in float64 and cast to the compute dtype: float64 for float64 input,
float32 otherwise. bfloat16 rows are upcast to float32 per stage and rounded once per stage.

These functions do no argument checks; :mod:`rdfft.ops` does.
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = ["CHUNK_ELEMENTS", "irdfft_rows_", "rdfft_rows_"]

#: Upper bound on the elements of one chunk of rows transformed at once (bounds the workspace).
CHUNK_ELEMENTS = 1 << 18


@functools.lru_cache(maxsize=128)
def _bit_reversal(n: int, device: torch.device) -> torch.Tensor:
    bits = n.bit_length() - 1
    rev = torch.zeros(n, dtype=torch.long)
    for b in range(bits):
        rev |= ((torch.arange(n) >> b) & 1) << (bits - 1 - b)
    return rev.to(device)


@functools.lru_cache(maxsize=256)
def _twiddles(
    size: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    # W^j = exp(-2πi j / L) for j = 1 .. L/4 - 1
    j = torch.arange(1, size // 4, dtype=torch.float64)
    angle = 2 * math.pi * j / size
    return torch.cos(angle).to(dtype).to(device), (-torch.sin(angle)).to(dtype).to(device)


# Slice reads copy (``.to(cd, copy=True)``): a same-dtype ``.to`` would alias the buffer that the
# stage overwrites. Flipped reads copy already.


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _stage_forward(h: torch.Tensor, size: int) -> None:
    """One decimation-in-time stage of length ``size`` on rows ``h`` (R, N), in place."""
    n = h.shape[-1]
    half = size // 2
    v = h.view(h.shape[0], n // size, size)
    cd = _compute_dtype(h.dtype)
    e0 = v[..., 0].to(cd, copy=True)
    o0 = v[..., half].to(cd, copy=True)
    v[..., 0].copy_(e0 + o0)
    v[..., half].copy_(e0 - o0)
    if size >= 4:
        v[..., half + half // 2].neg_()  # j = M/2
    q = half // 2
    if q > 1:
        wr, wi = _twiddles(size, cd, h.device)
        er = v[..., 1:q].to(cd, copy=True)
        ei = v[..., q + 1 : half].flip(-1).to(cd)
        odd_r = v[..., half + 1 : half + q].to(cd, copy=True)
        odd_i = v[..., half + q + 1 :].flip(-1).to(cd)
        tr = wr * odd_r - wi * odd_i
        ti = wr * odd_i + wi * odd_r
        v[..., 1:q].copy_(er + tr)
        v[..., q + 1 : half].copy_((er - tr).flip(-1))
        v[..., half + 1 : half + q].copy_(ti - ei)
        v[..., half + q + 1 :].copy_((ei + ti).flip(-1))


def _stage_inverse(h: torch.Tensor, size: int) -> None:
    """The exact inverse of :func:`_stage_forward` (carries the 1/2 per stage), in place."""
    n = h.shape[-1]
    half = size // 2
    v = h.view(h.shape[0], n // size, size)
    cd = _compute_dtype(h.dtype)
    y0 = v[..., 0].to(cd, copy=True)
    ym = v[..., half].to(cd, copy=True)
    v[..., 0].copy_((y0 + ym) * 0.5)
    v[..., half].copy_((y0 - ym) * 0.5)
    if size >= 4:
        v[..., half + half // 2].neg_()
    q = half // 2
    if q > 1:
        wr, wi = _twiddles(size, cd, h.device)
        a = v[..., 1:q].to(cd, copy=True)  # Re Y_j
        b = v[..., q + 1 : half].flip(-1).to(cd)  # Re Y_{M-j}
        c = v[..., half + 1 : half + q].to(cd, copy=True)  # Im Y_{M-j}
        d = v[..., half + q + 1 :].flip(-1).to(cd)  # Im Y_j
        tr = (a - b) * 0.5
        ti = (d + c) * 0.5
        v[..., 1:q].copy_((a + b) * 0.5)
        v[..., q + 1 : half].copy_(((d - c) * 0.5).flip(-1))
        v[..., half + 1 : half + q].copy_(wr * tr + wi * ti)
        v[..., half + q + 1 :].copy_((wr * ti - wi * tr).flip(-1))


def _permute(h: torch.Tensor) -> None:
    h.copy_(h.index_select(-1, _bit_reversal(h.shape[-1], h.device)))


def _chunks(rows: torch.Tensor):
    n = rows.shape[-1]
    step = max(1, CHUNK_ELEMENTS // n)
    for start in range(0, rows.shape[0], step):
        yield rows[start : start + step]


def rdfft_rows_(rows: torch.Tensor) -> torch.Tensor:
    """Forward rdFFT of every row of ``rows`` (R, N) (last dim stride 1), in place."""
    n = rows.shape[-1]
    for h in _chunks(rows):
        _permute(h)
        size = 2
        while size <= n:
            _stage_forward(h, size)
            size *= 2
    return rows


def irdfft_rows_(rows: torch.Tensor) -> torch.Tensor:
    """Inverse rdFFT (with 1/N) of every row of ``rows`` (R, N) (last dim stride 1), in place."""
    n = rows.shape[-1]
    for h in _chunks(rows):
        size = n
        while size >= 2:
            _stage_inverse(h, size)
            size //= 2
        _permute(h)
    return rows
