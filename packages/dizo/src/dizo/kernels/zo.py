"""Triton kernels: seeded in-place perturbation, projection and displacement norms.

z is drawn by ``tl.randn(seed, offset_base + element_index)`` (Philox) and never stored: it depends
only on the seed and the global element index (the tensor's offset base plus its flat index),
not on BLOCK. All arithmetic is fp32, the result cast back to the tensor's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _perturb_kernel(x_ptr, n, seed, base, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    z = tl.randn(seed, base + offs)
    y = x.to(tl.float32) + scale * z
    tl.store(x_ptr + offs, y.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _project_kernel(x_ptr, a_ptr, n, ratio, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = a + ratio * (x - a)
    tl.store(x_ptr + offs, y.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sqdiff_kernel(x_ptr, a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    d = x - a
    tl.store(out_ptr + pid, tl.sum(d * d, axis=0))


def perturb_(tensors, seed: int, scale: float, block: int = BLOCK) -> None:
    base = 0
    for t in tensors:
        n = t.numel()
        _perturb_kernel[(triton.cdiv(n, block),)](t, n, seed, base, float(scale), BLOCK=block)
        base += n


def project_(tensors, anchors, ratios, block: int = BLOCK) -> None:
    for t, a, r in zip(tensors, anchors, ratios):
        if float(r) == 1.0:
            continue
        n = t.numel()
        _project_kernel[(triton.cdiv(n, block),)](t, a, n, float(r), BLOCK=block)


def displacement_norms(tensors, anchors, block: int = BLOCK) -> torch.Tensor:
    out = []
    for t, a in zip(tensors, anchors):
        n = t.numel()
        grid = triton.cdiv(n, block)
        partial = torch.empty(grid, device=t.device, dtype=torch.float32)
        _sqdiff_kernel[(grid,)](t, a, partial, n, BLOCK=block)
        out.append(partial.double().sum().sqrt())
    return torch.stack(out).cpu()
