"""Export of quantized weights to int32-packed integer codes, and the torch packed matmul.

Code format (per output row ``r``): ``W[r, k] = s_r · (c[r, k] − z)`` with codes ``c ∈ [0, 2^b)``:

=======  ===========  ======  ============================================
bits     scale ``s``  ``z``   storage
=======  ===========  ======  ============================================
1        ``2α``       0.5     one 1-bit plane (32 codes per int32 word)
1.58     ``2α/3``     1       one 2-bit plane (ternary codes 0, 1, 2)
2        ``α/2``      1.5     one 2-bit plane (torchao's zero point −0.5)
3        ``α``        4       a 2-bit plane (low bits) + a 1-bit plane (high bit)
4        ``α``        8       one 4-bit plane (8 codes per word)
=======  ===========  ======  ============================================

Layout of a plane with ``b`` bits: ``v = 32/b`` codes per int32 word, ``K`` padded to a multiple of
32 (so every plane of a 3-bit weight has the same padded length), ``Wd = K_pad / v`` words per row;
code ``k = i·Wd + j`` sits in word ``j`` at bit offset ``i·b`` ("planar", as torchao's
``bitpacking``), so unpacking one shift ``i`` yields a contiguous slice of K and a kernel needs no
reshape. Padded codes are 0 and meet zero activations, so they contribute nothing.

1-bit caveat: the official ``sign(0) = 0`` has no code; an exactly zero weight packs as ``+α``.
"""

from __future__ import annotations

import torch

from paretoq.ops import _check_weight_alpha, _clamp_alpha, check_bits
from paretoq.reference import SEQ_CLIP

__all__ = [
    "K_ALIGN",
    "PLANES",
    "dequantize_packed",
    "dequantize_packed_fast",
    "pack_codes",
    "pack_ternary_base3",
    "packed_matmul_torch",
    "padded_k",
    "plane_specs",
    "scale_and_zero",
    "unpack_codes",
    "unpack_ternary_base3",
    "weight_to_codes",
]

#: K is padded to a multiple of this (the lcm of 32/b for b in 1, 2, 4).
K_ALIGN = 32

#: Planes per bit width: ``(plane_bits, offset z_p, factor f_p)`` with ``Σ_p f_p·(c_p − z_p) = c − z``.
PLANES: dict[float, tuple[tuple[int, float, float], ...]] = {
    1: ((1, 0.5, 1.0),),
    1.58: ((2, 1.0, 1.0),),
    2: ((2, 1.5, 1.0),),
    3: ((2, 2.0, 1.0), (1, 0.5, 4.0)),
    4: ((4, 8.0, 1.0),),
}


def plane_specs(bits: float) -> tuple[tuple[int, float, float], ...]:
    """``(plane_bits, offset, factor)`` of each stored plane of a bit width."""
    bits = check_bits(bits)
    if bits >= 16:
        raise ValueError("bits: 16-bit weights are not packed")
    return PLANES[bits]


def scale_and_zero(alpha: torch.Tensor, bits: float) -> tuple[torch.Tensor, float]:
    """Per-row scale ``s`` (shape ``(out,)``) and offset ``z`` of the code format, from α ``(out, 1)``."""
    a = _clamp_alpha(alpha).reshape(-1)
    if bits == 1:
        return 2 * a, 0.5
    if bits == 1.58:
        return 2 * a / 3, 1.0
    if bits == 2:
        return a / 2, 1.5
    half = 2 ** (int(bits) - 1)
    return a.clone(), float(half)


@torch.no_grad()
def weight_to_codes(
    w: torch.Tensor, alpha: torch.Tensor, bits: float
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Integer codes of ``Q(W/α)`` and the per-row scale and offset.

    Args:
        w: latent weight ``(out, in)``; alpha: ``(out, 1)``; bits: 1, 1.58, 2, 3 or 4.

    Returns:
        ``(codes, scale, zero)``: int64 codes ``(out, in)`` in ``[0, 2^b)``, scale ``(out,)`` in
        ``alpha``'s dtype, and the float offset, with ``s·(c − z) = α·Q(W/α)``.
    """
    bits = check_bits(bits)
    if bits >= 16:
        raise ValueError("bits: 16-bit weights are not packed")
    _check_weight_alpha(w, alpha)
    a = _clamp_alpha(alpha)
    x = w / a
    if bits == 1:
        codes = (w >= 0).to(torch.int64)  # sign(0) = 0 has no code: zero packs as +α
    elif bits in (1.58, 2):
        n, s = (1.5, 0.0) if bits == 1.58 else (2.0, 0.5)
        k = torch.round(torch.clamp(x, -SEQ_CLIP, SEQ_CLIP) * n - s)
        codes = (k + (1 if bits == 1.58 else 2)).to(torch.int64)
    else:
        half = 2 ** (int(bits) - 1)
        codes = (torch.clamp(torch.round(x), -half, half - 1) + half).to(torch.int64)
    scale, zero = scale_and_zero(alpha, bits)
    return codes, scale, zero


def padded_k(k: int) -> int:
    """``k`` rounded up to a multiple of :data:`K_ALIGN`."""
    return -(-k // K_ALIGN) * K_ALIGN


def pack_codes(codes: torch.Tensor, plane_bits: int) -> torch.Tensor:
    """Pack codes ``(N, K)`` in ``[0, 2^plane_bits)`` into int32 words ``(N, K_pad·plane_bits/32)``.

    Args:
        codes: integer tensor ``(N, K)``.
        plane_bits: 1, 2 or 4.

    Returns:
        int32 words on ``codes``' device, planar along K (see the module docstring).
    """
    if plane_bits not in (1, 2, 4):
        raise ValueError(f"plane_bits: expected 1, 2 or 4, got {plane_bits!r}")
    if codes.dim() != 2 or codes.is_floating_point():
        raise ValueError(
            f"codes: expected a 2-D integer tensor, got {codes.dtype} of shape {tuple(codes.shape)}"
        )
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= 1 << plane_bits):
        raise ValueError(
            f"codes: values must lie in [0, {1 << plane_bits}) for {plane_bits}-bit packing"
        )
    n, k = codes.shape
    kp = padded_k(k)
    v = 32 // plane_bits
    c = torch.zeros(n, kp, dtype=torch.int64, device=codes.device)
    c[:, :k] = codes
    shifts = torch.arange(v, device=codes.device, dtype=torch.int64) * plane_bits
    # Bit fields are disjoint, so the sum is the bitwise OR.
    words = (c.view(n, v, kp // v) << shifts[None, :, None]).sum(dim=1)
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32)


def unpack_codes(words: torch.Tensor, plane_bits: int, k: int | None = None) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: int32 ``(N, Wd)`` → int64 codes ``(N, k)`` (default all ``Wd·32/b``)."""
    if plane_bits not in (1, 2, 4):
        raise ValueError(f"plane_bits: expected 1, 2 or 4, got {plane_bits!r}")
    if words.dtype != torch.int32 or words.dim() != 2:
        raise ValueError(
            f"words: expected a 2-D int32 tensor, got {words.dtype} of shape {tuple(words.shape)}"
        )
    v = 32 // plane_bits
    mask = (1 << plane_bits) - 1
    # int32 >> is arithmetic: mask after shifting.
    out = torch.cat([(words >> (i * plane_bits)) & mask for i in range(v)], dim=1).to(torch.int64)
    return out if k is None else out[:, :k]


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def dequantize_packed(
    planes: list[torch.Tensor],
    scale: torch.Tensor,
    bits: float,
    in_features: int,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The dense weight ``s·(c − z)``, shape ``(out, in_features)`` (the reference for the matmuls)."""
    specs = plane_specs(bits)
    dtype = dtype or scale.dtype
    codes = None
    for (pb, _, f), words in zip(specs, planes):
        c = unpack_codes(words, pb, in_features).to(dtype) * f
        codes = c if codes is None else codes + c
    zero = sum(f * z for _, z, f in specs)
    return scale.to(dtype)[:, None] * (codes - zero)


def dequantize_packed_fast(
    planes: list[torch.Tensor],
    scale: torch.Tensor,
    bits: float,
    in_features: int,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """:func:`dequantize_packed` in fewer, larger ops: one broadcast shift over all the words.

    ``(words[:, None, :] >> (i·b)) & mask`` is ``(out, 32/b, Wd)`` in int32, which reshapes to
    ``(out, K_pad)`` in the planar order without a ``cat``. The fastest torch dequantizer of the
    package: the dequantize-then-matmul baseline of the speed case. Same values as
    :func:`dequantize_packed`.

    Example:
        >>> import torch, paretoq
        >>> q = paretoq.QuantLinear.from_linear(torch.nn.Linear(40, 3, bias=False), bits=3)
        >>> p = paretoq.PackedLinear.from_quant_linear(q)
        >>> w = dequantize_packed_fast(p.planes, p.scale, 3, 40)
        >>> w.shape, torch.equal(w, p.dequantize())
        (torch.Size([3, 40]), True)
    """
    specs = plane_specs(bits)
    dtype = dtype or scale.dtype
    codes = None
    for (pb, _, f), words in zip(specs, planes):
        shifts = torch.arange(0, 32, pb, dtype=torch.int32, device=words.device)
        c = (words[:, None, :] >> shifts[None, :, None]) & ((1 << pb) - 1)
        c = c.reshape(words.shape[0], -1)[:, :in_features].to(dtype)
        c = c if f == 1.0 else c * f
        codes = c if codes is None else codes + c
    zero = sum(f * z for _, z, f in specs)
    return scale.to(dtype)[:, None] * (codes - zero)


def packed_matmul_torch(
    x: torch.Tensor,
    planes: list[torch.Tensor],
    scale: torch.Tensor,
    bits: float,
    in_features: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``y = s ⊙ (x · (C − z)ᵀ) + bias`` unpacking one shift (a contiguous K slice) at a time.

    The offset is applied to the codes in registers (not as ``z·rowsum(x)``), which avoids the
    cancellation of the rowsum form. Accumulation is fp32 (fp64 for fp64 inputs).

    Args:
        x: ``(..., in_features)``.
        planes: int32 words per plane, each ``(out, K_pad·b_p/32)``.
        scale: ``(out,)``.
        bits: 1, 1.58, 2, 3 or 4.
        in_features: K.
        bias: optional ``(out,)``.

    Returns:
        ``(..., out)`` in ``x``'s dtype.
    """
    k = in_features
    lead = x.shape[:-1]
    cdt = _compute_dtype(x)
    x2 = x.reshape(-1, k).to(cdt)
    n = scale.shape[0]
    acc = torch.zeros(x2.shape[0], n, dtype=cdt, device=x.device)
    for (pb, z, f), words in zip(plane_specs(bits), planes):
        v, wd, mask = 32 // pb, words.shape[1], (1 << pb) - 1
        for i in range(v):
            k0 = i * wd
            if k0 >= k:
                break
            k1 = min(k, k0 + wd)
            codes = ((words[:, : k1 - k0] >> (i * pb)) & mask).to(cdt) - z
            part = x2[:, k0:k1] @ codes.T
            acc += part if f == 1.0 else f * part
    y = acc * scale.to(cdt)
    if bias is not None:
        y = y + bias.to(cdt)
    return y.to(x.dtype).reshape(*lead, n)


def pack_ternary_base3(codes: torch.Tensor) -> torch.Tensor:
    """Pack ternary codes ``(N, K)`` in {0, 1, 2} five per byte (base 3, 1.6 bits/weight, as llama.cpp TQ1_0).

    Byte ``j`` of a row holds ``Σ_t c[5j + t]·3^t`` (≤ 242); K is padded with zeros to a multiple of
    5. A storage/size format: the matmuls use the 2-bit planes.

    Returns:
        uint8 ``(N, ceil(K/5))``.
    """
    if codes.dim() != 2 or codes.is_floating_point():
        raise ValueError(
            f"codes: expected a 2-D integer tensor, got {codes.dtype} of shape {tuple(codes.shape)}"
        )
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 2):
        raise ValueError("codes: ternary codes must lie in {0, 1, 2}")
    n, k = codes.shape
    kp = -(-k // 5) * 5
    c = torch.zeros(n, kp, dtype=torch.int64, device=codes.device)
    c[:, :k] = codes
    powers = torch.tensor([1, 3, 9, 27, 81], dtype=torch.int64, device=codes.device)
    return (c.view(n, kp // 5, 5) * powers).sum(dim=-1).to(torch.uint8)


def unpack_ternary_base3(packed: torch.Tensor, k: int) -> torch.Tensor:
    """Inverse of :func:`pack_ternary_base3`: uint8 ``(N, ceil(K/5))`` → int64 codes ``(N, k)``."""
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise ValueError(
            f"packed: expected a 2-D uint8 tensor, got {packed.dtype} of shape {tuple(packed.shape)}"
        )
    v = packed.to(torch.int64)
    digits = []
    for _ in range(5):
        digits.append(v % 3)
        v = v // 3
    return torch.stack(digits, dim=-1).reshape(packed.shape[0], -1)[:, :k]
