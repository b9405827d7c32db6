"""Triton ``sparse_adam_step``: gather p, g at I, update compact m, v, age, scatter p (no atomics:
indices are unique within a tensor). One launch per tensor; fp32 state."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _sparse_adam_kernel(
    p_ptr,
    g_ptr,
    idx_ptr,
    m_ptr,
    v_ptr,
    age_ptr,
    n,
    lr,
    beta1,
    beta2,
    log_beta1,
    log_beta2,
    eps,
    decay,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    idx = tl.load(idx_ptr + offs, mask=live, other=0).to(tl.int64)
    w = tl.load(p_ptr + idx, mask=live, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + idx, mask=live, other=0.0).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=live, other=0.0)
    v = tl.load(v_ptr + offs, mask=live, other=0.0)
    age = tl.load(age_ptr + offs, mask=live, other=0) + 1
    a = age.to(tl.float32)
    w = w * decay
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    bc1 = 1.0 - tl.exp(a * log_beta1)
    bc2 = 1.0 - tl.exp(a * log_beta2)
    w = w - lr * (m / bc1) / (tl.sqrt(v / bc2) + eps)
    tl.store(m_ptr + offs, m, mask=live)
    tl.store(v_ptr + offs, v, mask=live)
    tl.store(age_ptr + offs, age, mask=live)
    tl.store(p_ptr + idx, w.to(p_ptr.dtype.element_ty), mask=live)


def sparse_adam_step_triton(
    p, grad, idx, exp_avg, exp_avg_sq, age, *, lr, beta1, beta2, eps, weight_decay
):
    """In-place fused step (see :func:`nanoadam.ops.sparse_adam_step`)."""
    import math

    if exp_avg.dtype != torch.float32 or exp_avg_sq.dtype != torch.float32:
        raise TypeError(f"exp_avg: the Triton step needs float32 state, got {exp_avg.dtype}")
    n = idx.numel()
    if n == 0:
        return
    g = grad.contiguous()
    block = 1024
    lb1 = math.log(beta1) if beta1 > 0 else -1e30
    lb2 = math.log(beta2) if beta2 > 0 else -1e30
    _sparse_adam_kernel[(triton.cdiv(n, block),)](
        p,
        g,
        idx,
        exp_avg,
        exp_avg_sq,
        age,
        n,
        lr,
        beta1,
        beta2,
        lb1,
        lb2,
        eps,
        1.0 - lr * weight_decay,
        BLOCK=block,
    )
