"""Fused decode-and-add: base[i] += scale * (lo + code * step) where bit i of the mask is set.

Device format (see :func:`ultradelta.ops.to_device_format`): a 1-bit mask in int32 words (bit j of
word w is element 32 w + j), the kept codes (uint8) compacted in element order, and for each
1024-element block the number of kept entries before it. A program handles one block: it loads
32 mask words, expands them to bits, takes an exclusive prefix sum for each kept element's slot
in the compacted codes, gathers, dequantizes, and adds into the base weight in place.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _decode_add_kernel(
    base_ptr, codes_ptr, words_ptr, offsets_ptr, n, lo, step, scale, BLOCK: tl.constexpr
):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    inb = offs < n
    words = tl.load(words_ptr + offs // 32, mask=inb, other=0)
    bit = (words >> (offs % 32)) & 1
    bit = tl.where(inb, bit, 0)
    slot = tl.cumsum(bit, 0) - bit
    start = tl.load(offsets_ptr + pid)
    kept = bit != 0
    code = tl.load(codes_ptr + start + slot, mask=kept, other=0).to(tl.float32)
    base = tl.load(base_ptr + offs, mask=inb, other=0.0)
    value = (lo + code * step) * scale
    out = base.to(tl.float32) + tl.where(kept, value, 0.0)
    tl.store(base_ptr + offs, out.to(base_ptr.dtype.element_ty), mask=inb)


def decode_add_triton(base, codes, mask_words, block_offsets, lo: float, step: float, scale: float):
    n = base.numel()
    grid = (triton.cdiv(n, BLOCK),)
    _decode_add_kernel[grid](
        base, codes, mask_words, block_offsets, n, float(lo), float(step), float(scale), BLOCK=BLOCK
    )
    return base
