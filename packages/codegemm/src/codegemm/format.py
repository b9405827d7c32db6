"""The storage format: shape checks, and conversion to and from the official CodeGEMM layout and AQLM's.

Ours (also what every op takes)::

    codes     uint8 [M, K/v, m]     code of sub-vector j of row r in codebook k
    codebooks float [m, C, v]       C = 2**b centroids of v inputs each
    scales    float [M, K/g]        one scale per row and group of g inputs

Official CodeGEMM (``codegemm/inference/codegemm_linear.py``): codes int32 ``[m, K/v/4, M]`` with
four uint8 codes per word packed LSB-first along K, codebooks fp16 ``[m, 256, v]``, scales fp16
``[K/g, M]``. AQLM (``aqlm/inference.py``): signed codes ``[M/out_g, K/in_g, m]`` (int8 for b=8),
codebooks ``[m, C, out_g, in_g]`` and per-output-channel scales ``[M/out_g, 1, 1, 1]``; with
out_g = 1 it maps onto ours with g = K.
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = [
    "CodebookShape",
    "check_format",
    "from_aqlm",
    "from_official",
    "pack_codes_official",
    "to_aqlm",
    "to_official",
    "unpack_codes_official",
]


@dataclasses.dataclass(frozen=True)
class CodebookShape:
    """The sizes a (codes, codebooks, scales) triple implies: M×K weight, m, C, v, g."""

    out_features: int
    in_features: int
    num_codebooks: int
    codebook_size: int
    vector_size: int
    group_size: int


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def check_format(
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    check_values: bool = True,
) -> CodebookShape:
    """Check a (codes, codebooks, scales) triple and return the sizes it implies.

    Args:
        codes: uint8 ``[M, K/v, m]``.
        codebooks: floating ``[m, C, v]``, C a power of two <= 256.
        scales: floating ``[M, K/g]``, g a multiple of v.
        check_values: also check that every code is < C (one pass over the codes).

    Raises:
        TypeError: a non-tensor, non-uint8 codes, or non-floating codebooks/scales.
        ValueError: a shape mismatch, an out-of-range code, or tensors on different devices.
    """
    for name, t in (("codes", codes), ("codebooks", codebooks), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes: expected dtype torch.uint8, got {codes.dtype}")
    if not codebooks.is_floating_point():
        raise TypeError(f"codebooks: expected a floating dtype, got {codebooks.dtype}")
    if not scales.is_floating_point():
        raise TypeError(f"scales: expected a floating dtype, got {scales.dtype}")
    if codes.dim() != 3:
        raise ValueError(f"codes: expected 3 dims [M, K/v, m], got shape {_shape(codes)}")
    if codebooks.dim() != 3:
        raise ValueError(f"codebooks: expected 3 dims [m, C, v], got shape {_shape(codebooks)}")
    if scales.dim() != 2:
        raise ValueError(f"scales: expected 2 dims [M, K/g], got shape {_shape(scales)}")
    devices = {codes.device, codebooks.device, scales.device}
    if len(devices) > 1:
        raise ValueError(
            f"codes, codebooks, scales: expected one device, got {codes.device}, "
            f"{codebooks.device}, {scales.device}"
        )
    rows, num_vectors, m = codes.shape
    m_books, size, v = codebooks.shape
    if m != m_books:
        raise ValueError(
            f"codes: last dim (number of codebooks) is {m} but codebooks has {m_books} "
            f"(codes {_shape(codes)}, codebooks {_shape(codebooks)})"
        )
    if size < 1 or size > 256 or size & (size - 1):
        raise ValueError(
            f"codebooks: expected a power-of-two codebook size <= 256 (uint8 codes), got C={size}"
        )
    if scales.shape[0] != rows:
        raise ValueError(f"scales: expected {rows} rows to match codes, got shape {_shape(scales)}")
    k = num_vectors * v
    groups = scales.shape[1]
    if groups < 1 or k % groups:
        raise ValueError(
            f"scales: expected a number of groups dividing K={k} (K/v={num_vectors} sub-vectors of "
            f"v={v}), got {groups}"
        )
    g = k // groups
    if g % v:
        raise ValueError(
            f"scales: group size g=K/groups={g} must be a multiple of the vector size v={v}"
        )
    if check_values and codes.numel() and size < 256:
        top = int(codes.max())
        if top >= size:
            raise ValueError(f"codes: expected values < C={size} (2^b), got a maximum of {top}")
    return CodebookShape(rows, k, m, size, v, g)


# ----------------------------------------------------------------------------- official layout


def pack_codes_official(codes: torch.Tensor) -> torch.Tensor:
    """Pack uint8 codes ``[M, K/v, m]`` into the official int32 ``[m, K/v/4, M]`` (LSB-first along K)."""
    if codes.dtype != torch.uint8 or codes.dim() != 3:
        raise TypeError(f"codes: expected uint8 [M, K/v, m], got {codes.dtype} {_shape(codes)}")
    rows, num_vectors, m = codes.shape
    if num_vectors % 4:
        raise ValueError(
            f"codes: K/v must be a multiple of 4 to pack 4 codes per int32, got {num_vectors}"
        )
    c = codes.permute(2, 1, 0).to(torch.int64).reshape(m, num_vectors // 4, 4, rows)
    word = c[:, :, 0] | (c[:, :, 1] << 8) | (c[:, :, 2] << 16) | (c[:, :, 3] << 24)
    # Reinterpret the unsigned 32-bit word as int32, as the CUDA kernel does.
    word = torch.where(word >= 1 << 31, word - (1 << 32), word)
    return word.to(torch.int32).contiguous()


def unpack_codes_official(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_codes_official`: int32 ``[m, K/v/4, M]`` -> uint8 ``[M, K/v, m]``."""
    if packed.dtype != torch.int32 or packed.dim() != 3:
        raise TypeError(
            f"packed: expected int32 [m, K/v/4, M], got {packed.dtype} {_shape(packed)}"
        )
    m, words, rows = packed.shape
    w = packed.to(torch.int64) & 0xFFFFFFFF
    parts = torch.stack([(w >> (8 * i)) & 0xFF for i in range(4)], dim=2)  # [m, words, 4, M]
    return parts.reshape(m, words * 4, rows).permute(2, 1, 0).to(torch.uint8).contiguous()


def to_official(
    codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ours -> official: (int32 codes [m, K/v/4, M], fp16 codebooks [m, C, v], fp16 scales [K/g, M])."""
    check_format(codes, codebooks, scales)
    return (
        pack_codes_official(codes),
        codebooks.to(torch.float16).contiguous(),
        scales.t().to(torch.float16).contiguous(),
    )


def from_official(
    packed: torch.Tensor, codebooks: torch.Tensor, scales_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Official -> ours: (uint8 codes [M, K/v, m], codebooks [m, C, v], scales [M, K/g])."""
    codes = unpack_codes_official(packed)
    if scales_t.dim() != 2:
        raise ValueError(f"scales_t: expected [K/g, M], got shape {_shape(scales_t)}")
    scales = scales_t.t().contiguous()
    check_format(codes, codebooks, scales)
    return codes, codebooks, scales


# ----------------------------------------------------------------------------- AQLM layout


def to_aqlm(
    codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ours (g = K only) -> AQLM with out_group_size 1: signed codes, codebooks [m,C,1,v], scales [M,1,1,1].

    AQLM stores 8-bit codes as int8 (value - 256 above 127) and unpacks them modulo 2^b.
    """
    shape = check_format(codes, codebooks, scales)
    if shape.group_size != shape.in_features:
        raise ValueError(
            f"scales: AQLM has one scale per output channel, so g must equal K={shape.in_features}; "
            f"got g={shape.group_size}"
        )
    signed = codes.to(torch.int16)
    signed = torch.where(signed >= 128, signed - 256, signed).to(torch.int8)
    return signed, codebooks.unsqueeze(2).contiguous(), scales.reshape(-1, 1, 1, 1).contiguous()


def from_aqlm(
    codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AQLM with out_group_size 1 and b <= 8 -> ours (g = K)."""
    if codebooks.dim() != 4 or codebooks.shape[2] != 1:
        raise ValueError(
            f"codebooks: expected AQLM [m, C, out_group_size=1, v], got shape {_shape(codebooks)}"
        )
    size = codebooks.shape[1]
    if size > 256:
        raise ValueError(f"codebooks: codes wider than 8 bits are not supported, got C={size}")
    ours = torch.remainder(codes.to(torch.int64), size).to(torch.uint8)
    return _checked(ours, codebooks[:, :, 0, :].contiguous(), scales.reshape(-1, 1).contiguous())


def _checked(codes, codebooks, scales):
    check_format(codes, codebooks, scales)
    return codes, codebooks, scales
