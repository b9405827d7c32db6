"""Public ops of ultradelta: the device format and the fused decode-and-add with backend dispatch."""

from __future__ import annotations

import torch

from .packed import CompressedTensor

__all__ = ["BLOCK", "apply_compressed", "to_device_format"]

#: Elements per block of the compacted device format (one Triton program each).
BLOCK = 1024


def to_device_format(ct: CompressedTensor, device=None) -> dict:
    """The kernel's inputs for one coded tensor: ``codes`` (uint8, kept codes in element order),
    ``mask_words`` (int32, 1 bit per element), ``block_offsets`` (int32, kept entries before each
    1024-element block), ``lo``, ``step = (hi - lo) / (2^b - 1)`` and ``scale`` (fp32 floats)."""
    if not isinstance(ct, CompressedTensor):
        raise TypeError(f"ct: expected a CompressedTensor, got {type(ct).__name__}")
    if ct.codes is None:
        raise ValueError(
            "ct: the device format needs a coded tensor (quantize=True), got fp16 values"
        )
    n = ct.numel
    mask = torch.zeros(((n + 31) // 32) * 32, dtype=torch.int64)
    mask[ct.indices] = 1
    weights = torch.ones(32, dtype=torch.int64) << torch.arange(32)
    words = (mask.reshape(-1, 32) * weights).sum(1)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    n_blocks = (n + BLOCK - 1) // BLOCK
    per_block = torch.bincount(ct.indices // BLOCK, minlength=n_blocks)
    offsets = (torch.cumsum(per_block, 0) - per_block).to(torch.int32)
    lo = torch.tensor(ct.lo, dtype=torch.float32)
    step = (torch.tensor(ct.hi, dtype=torch.float32) - lo) / (2**ct.bits - 1)
    return {
        "codes": ct.codes.to(device),
        "mask_words": words.to(device),
        "block_offsets": offsets.to(device),
        "lo": float(lo),
        "step": float(step),
        "scale": float(ct.scale),
    }


def _decode_add_torch(base, codes, mask_words, lo, step, scale):
    n = base.numel()
    shifts = torch.arange(32, device=base.device, dtype=torch.int32)
    bits = ((mask_words[:, None] >> shifts[None, :]) & 1).reshape(-1)[:n].bool()
    value = (
        torch.tensor(lo, dtype=torch.float32)
        + codes.float() * torch.tensor(step, dtype=torch.float32)
    ) * torch.tensor(scale, dtype=torch.float32)
    flat = base.view(-1)
    flat[bits] = (flat[bits].float() + value.to(flat.device)).to(flat.dtype)
    return base


def apply_compressed(
    base: torch.Tensor,
    codes: torch.Tensor,
    mask_words: torch.Tensor,
    block_offsets: torch.Tensor,
    lo: float,
    step: float,
    scale: float,
    backend: str | None = None,
) -> torch.Tensor:
    """Decode a coded delta and add it into ``base`` in place: base += scale * (lo + code * step)
    on the mask. Triton on CUDA (or under ``TRITON_INTERPRET=1`` with ``backend="triton"``), torch
    otherwise. Returns ``base``.

    Example:
        >>> import torch
        >>> from ultradelta import compress
        >>> d = {"w": torch.randn(40, 30, generator=torch.Generator().manual_seed(0))}
        >>> (c,) = compress([d])
        >>> fmt = to_device_format(c.tensors["w"])
        >>> w = torch.zeros(40, 30)
        >>> _ = apply_compressed(w, **fmt)
        >>> torch.equal(w, c.tensors["w"].to_dense())
        True
    """
    if not isinstance(base, torch.Tensor) or not base.is_floating_point():
        raise TypeError(
            f"base: expected a floating-point tensor, got {getattr(base, 'dtype', type(base))}"
        )
    if not base.is_contiguous():
        raise ValueError("base: expected a contiguous tensor (it is updated in place)")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes: expected uint8, got {codes.dtype}")
    if mask_words.dtype != torch.int32 or mask_words.numel() != (base.numel() + 31) // 32:
        raise ValueError(
            f"mask_words: expected {(base.numel() + 31) // 32} int32 words, got {mask_words.numel()} {mask_words.dtype}"
        )
    n_blocks = (base.numel() + BLOCK - 1) // BLOCK
    if block_offsets.dtype != torch.int32 or block_offsets.numel() != n_blocks:
        raise ValueError(
            f"block_offsets: expected {n_blocks} int32 offsets, got {block_offsets.numel()}"
        )
    if backend not in (None, "torch", "triton"):
        raise ValueError(f"backend: expected None, 'torch' or 'triton', got {backend!r}")
    if backend is None:
        from neurips25_core.device import use_triton_for

        backend = "triton" if use_triton_for(base) else "torch"
    if backend == "triton":
        from .kernels.decode_add import decode_add_triton

        return decode_add_triton(base, codes, mask_words, block_offsets, lo, step, scale)
    return _decode_add_torch(base, codes, mask_words, lo, step, scale)
