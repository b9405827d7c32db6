"""Triton kernels of the logic layer, feature-major as in the official CUDA code.

Activations are (features, B): a transposed (B, in) view in, a transposed (out, B) buffer out, so
consecutive layers chain without copies.

* ``_forward``: per (neuron block × batch block), gather the two input rows, then
  ``y = α + a·(β + δ·b) + γ·b`` (the four coefficients ``w·T`` come precomputed in fp32).
* ``_coef_grad``: per neuron block, loop over the batch accumulating
  ``(Σg, Σga, Σgb, Σgab)`` in fp32; ``∂L/∂w = (these)·Tᵀ`` follows in torch.
* ``_input_grad``: per (input × batch block), walk the input's consumers in a CSR list
  (neuron, slot), adding ``g·(β + δ·b)`` for slot a and ``g·(γ + δ·a)`` for slot b. Each output
  element is written by one program in a fixed order: deterministic, no atomics.
* ``_packed_eval``: branch-free int32 logic on packed words
  ``(m11 & a & b) | (m10 & a & ~b) | (m01 & ~a & b) | (m00 & ~a & ~b)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..functional import gate_table

__all__ = ["consumer_csr", "logic_layer_triton", "packed_layer_triton"]

BLOCK_N = 16
BLOCK_B = 64


@triton.jit
def _forward(xt, ia, ib, coef, yt, OUT, B, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mn = n < OUT
    mb = b < B
    mask = mn[:, None] & mb[None, :]
    i0 = tl.load(ia + n, mask=mn, other=0).to(tl.int64)
    i1 = tl.load(ib + n, mask=mn, other=0).to(tl.int64)
    c0 = tl.load(coef + n * 4 + 0, mask=mn, other=0.0)
    c1 = tl.load(coef + n * 4 + 1, mask=mn, other=0.0)
    c2 = tl.load(coef + n * 4 + 2, mask=mn, other=0.0)
    c3 = tl.load(coef + n * 4 + 3, mask=mn, other=0.0)
    a = tl.load(xt + i0[:, None] * B + b[None, :], mask=mask, other=0.0)
    v = tl.load(xt + i1[:, None] * B + b[None, :], mask=mask, other=0.0)
    y = c0[:, None] + a * (c1[:, None] + c3[:, None] * v) + c2[:, None] * v
    tl.store(yt + n.to(tl.int64)[:, None] * B + b[None, :], y, mask=mask)


@triton.jit
def _coef_grad(xt, ia, ib, gyt, gcoef, OUT, B, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr):
    pid_n = tl.program_id(0)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = n < OUT
    i0 = tl.load(ia + n, mask=mn, other=0).to(tl.int64)
    i1 = tl.load(ib + n, mask=mn, other=0).to(tl.int64)
    rows = n.to(tl.int64)
    s0 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s3 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, B, BLOCK_B):
        b = start + tl.arange(0, BLOCK_B)
        mask = mn[:, None] & (b < B)[None, :]
        g = tl.load(gyt + rows[:, None] * B + b[None, :], mask=mask, other=0.0)
        a = tl.load(xt + i0[:, None] * B + b[None, :], mask=mask, other=0.0)
        v = tl.load(xt + i1[:, None] * B + b[None, :], mask=mask, other=0.0)
        ga = g * a
        s0 += tl.sum(g, axis=1)
        s1 += tl.sum(ga, axis=1)
        s2 += tl.sum(g * v, axis=1)
        s3 += tl.sum(ga * v, axis=1)
    tl.store(gcoef + n * 4 + 0, s0, mask=mn)
    tl.store(gcoef + n * 4 + 1, s1, mask=mn)
    tl.store(gcoef + n * 4 + 2, s2, mask=mn)
    tl.store(gcoef + n * 4 + 3, s3, mask=mn)


@triton.jit
def _input_grad(xt, ia, ib, coef, gyt, starts, consumers, slots, gxt, B, BLOCK_B: tl.constexpr):
    i = tl.program_id(0)
    pid_b = tl.program_id(1)
    b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mb = b < B
    lo = tl.load(starts + i)
    hi = tl.load(starts + i + 1)
    acc = tl.zeros([BLOCK_B], dtype=tl.float32)
    for k in range(lo, hi):
        n = tl.load(consumers + k).to(tl.int64)
        slot = tl.load(slots + k)
        # The other input of neuron n (b for slot 0, a for slot 1) and the matching coefficient.
        other = tl.where(slot == 0, tl.load(ib + n), tl.load(ia + n)).to(tl.int64)
        c_lin = tl.where(slot == 0, tl.load(coef + n * 4 + 1), tl.load(coef + n * 4 + 2))
        c_ab = tl.load(coef + n * 4 + 3)
        g = tl.load(gyt + n * B + b, mask=mb, other=0.0)
        v = tl.load(xt + other * B + b, mask=mb, other=0.0)
        acc += g * (c_lin + c_ab * v)
    tl.store(gxt + i.to(tl.int64) * B + b, acc, mask=mb)


@triton.jit
def _packed_eval(words, ia, ib, ids, out, OUT, W, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_w = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    w = pid_w * BLOCK_B + tl.arange(0, BLOCK_B)
    mn = n < OUT
    mask = mn[:, None] & (w < W)[None, :]
    i0 = tl.load(ia + n, mask=mn, other=0).to(tl.int64)
    i1 = tl.load(ib + n, mask=mn, other=0).to(tl.int64)
    gid = tl.load(ids + n, mask=mn, other=0)
    # All-ones / zero masks of the truth bits f(0,0), f(0,1), f(1,0), f(1,1).
    m00 = (-((gid >> 3) & 1))[:, None]
    m01 = (-((gid >> 2) & 1))[:, None]
    m10 = (-((gid >> 1) & 1))[:, None]
    m11 = (-(gid & 1))[:, None]
    a = tl.load(words + i0[:, None] * W + w[None, :], mask=mask, other=0)
    v = tl.load(words + i1[:, None] * W + w[None, :], mask=mask, other=0)
    na = ~a
    nv = ~v
    y = (m11 & a & v) | (m10 & a & nv) | (m01 & na & v) | (m00 & na & nv)
    tl.store(out + n.to(tl.int64)[:, None] * W + w[None, :], y, mask=mask)


def consumer_csr(ia: torch.Tensor, ib: torch.Tensor, in_dim: int):
    """For every input, the (neuron, slot) pairs reading it, sorted: ``(starts, consumers, slots)``.

    ``starts`` is (in_dim + 1,) int64; input ``i``'s consumers are ``consumers[starts[i]:starts[i+1]]``
    with ``slots`` 0 (read as a) or 1 (read as b).
    """
    out = ia.numel()
    src = torch.cat([ia, ib])
    neuron = torch.arange(out, device=ia.device).repeat(2)
    slot = torch.cat(
        [
            torch.zeros(out, dtype=torch.int32, device=ia.device),
            torch.ones(out, dtype=torch.int32, device=ia.device),
        ]
    )
    order = torch.argsort(src, stable=True)
    counts = torch.bincount(src, minlength=in_dim)
    starts = torch.zeros(in_dim + 1, dtype=torch.int64, device=ia.device)
    starts[1:] = counts.cumsum(0)
    return starts, neuron[order].contiguous(), slot[order].contiguous()


class _LogicLayerTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ia, ib, w):
        from neurips25_core.testing import poisoned_empty

        batch, in_dim = x.shape
        out = ia.numel()
        table = gate_table(torch.float32, x.device)
        coef = (w.to(torch.float32) @ table).contiguous()
        xt = x.t().contiguous()  # free when x is the previous layer's transposed output
        yt = poisoned_empty(out, batch, dtype=torch.float32, device=x.device)
        grid = (triton.cdiv(out, BLOCK_N), triton.cdiv(batch, BLOCK_B))
        _forward[grid](xt, ia, ib, coef, yt, out, batch, BLOCK_N=BLOCK_N, BLOCK_B=BLOCK_B)
        ctx.save_for_backward(xt, ia, ib, coef, table)
        ctx.w_dtype = w.dtype
        ctx.in_dim = in_dim
        return yt.t()

    @staticmethod
    def backward(ctx, grad_y):
        from neurips25_core.testing import poisoned_empty

        xt, ia, ib, coef, table = ctx.saved_tensors
        in_dim, batch = xt.shape
        out = ia.numel()
        gyt = grad_y.to(torch.float32).t().contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[3]:
            gcoef = poisoned_empty(out, 4, dtype=torch.float32, device=xt.device)
            _coef_grad[(triton.cdiv(out, BLOCK_N),)](
                xt, ia, ib, gyt, gcoef, out, batch, BLOCK_N=BLOCK_N, BLOCK_B=BLOCK_B
            )
            grad_w = (gcoef @ table.T).to(ctx.w_dtype)
        if ctx.needs_input_grad[0]:
            starts, consumers, slots = consumer_csr(ia, ib, in_dim)
            gxt = poisoned_empty(in_dim, batch, dtype=torch.float32, device=xt.device)
            _input_grad[(in_dim, triton.cdiv(batch, BLOCK_B))](
                xt, ia, ib, coef, gyt, starts, consumers, slots, gxt, batch, BLOCK_B=BLOCK_B
            )
            grad_x = gxt.t()
        return grad_x, None, None, grad_w


def logic_layer_triton(x: torch.Tensor, ia: torch.Tensor, ib: torch.Tensor, w: torch.Tensor):
    """The Triton logic layer, (B, in) float32 → (B, out) float32 (a transposed view)."""
    if x.dtype != torch.float32:
        raise TypeError(
            f"x: the triton backend computes in float32, got {x.dtype} (use backend='torch')"
        )
    return _LogicLayerTriton.apply(x, ia, ib, w)


def packed_layer_triton(words: torch.Tensor, ids: torch.Tensor, ia: torch.Tensor, ib: torch.Tensor):
    """One discrete layer on (in, W) int32 packed words → (out, W) int32 (branch-free logic)."""
    from neurips25_core.testing import poisoned_empty

    if words.dtype != torch.int32:
        raise TypeError(
            f"words: the triton eval kernel takes int32 words (word_bits=32), got {words.dtype}"
        )
    out_dim = ids.numel()
    num_words = words.shape[1]
    out = poisoned_empty(out_dim, num_words, dtype=torch.int32, device=words.device)
    grid = (triton.cdiv(out_dim, BLOCK_N), triton.cdiv(num_words, BLOCK_B))
    ids32 = ids.to(torch.int32).contiguous()
    _packed_eval[grid](
        words.contiguous(), ia, ib, ids32, out, out_dim, num_words, BLOCK_N=BLOCK_N, BLOCK_B=BLOCK_B
    )
    return out
