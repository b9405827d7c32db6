"""Triton ``sparse_adam_step``: gather p, g at I, update compact m, v, age, scatter p (no atomics:
indices are unique within a tensor); fp32 state.

* :func:`sparse_adam_step_triton` — one tensor, one launch.
* :func:`sparse_adam_step_multi_triton` — every tensor of a param group in one launch: tables of
  base addresses (int64, cast to pointers in the kernel) and a per-block table of (tensor, start),
  the ``multi_tensor_apply`` layout. One launch per (parameter dtype, index dtype) present.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _expm1(x):
    """exp(x) − 1 without cancellation (Kahan: (u − 1)·x / ln u, u = eˣ); 1 − β^age = −expm1.

    For u < 0.5 there is no cancellation and u − 1 is exact enough (and β = 0 gives u = 0).
    """
    u = tl.exp(x)
    kahan = (u - 1.0) * x / tl.log(tl.maximum(u, 0.5))
    return tl.where(u == 1.0, x, tl.where(u < 0.5, u - 1.0, kahan))


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
    bc1 = -_expm1(a * log_beta1)
    bc2 = -_expm1(a * log_beta2)
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


@triton.jit
def _sparse_adam_multi_kernel(
    p_tab,
    g_tab,
    idx_tab,
    m_tab,
    v_tab,
    age_tab,
    n_tab,
    block_tensor,
    block_start,
    lr,
    beta1,
    beta2,
    log_beta1,
    log_beta2,
    eps,
    decay,
    P_DTYPE: tl.constexpr,
    IDX_DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    t = tl.load(block_tensor + pid)
    start = tl.load(block_start + pid)
    n = tl.load(n_tab + t)
    p_ptr = tl.load(p_tab + t).to(tl.pointer_type(P_DTYPE))
    g_ptr = tl.load(g_tab + t).to(tl.pointer_type(P_DTYPE))
    idx_ptr = tl.load(idx_tab + t).to(tl.pointer_type(IDX_DTYPE))
    m_ptr = tl.load(m_tab + t).to(tl.pointer_type(tl.float32))
    v_ptr = tl.load(v_tab + t).to(tl.pointer_type(tl.float32))
    age_ptr = tl.load(age_tab + t).to(tl.pointer_type(tl.int32))
    offs = start + tl.arange(0, BLOCK)
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
    bc1 = -_expm1(a * log_beta1)
    bc2 = -_expm1(a * log_beta2)
    w = w - lr * (m / bc1) / (tl.sqrt(v / bc2) + eps)
    tl.store(m_ptr + offs, m, mask=live)
    tl.store(v_ptr + offs, v, mask=live)
    tl.store(age_ptr + offs, age, mask=live)
    tl.store(p_ptr + idx, w.to(P_DTYPE), mask=live)


_TL = {
    torch.float32: tl.float32,
    torch.bfloat16: tl.bfloat16,
    torch.float16: tl.float16,
    torch.int32: tl.int32,
    torch.int64: tl.int64,
}


def sparse_adam_step_multi_triton(
    params, grads, idxs, exp_avgs, exp_avg_sqs, ages, *, lr, beta1, beta2, eps, weight_decay
):
    """In-place fused step over many tensors (see :func:`nanoadam.ops.sparse_adam_step_multi`)."""
    import math

    block = 1024
    lb1 = math.log(beta1) if beta1 > 0 else -1e30
    lb2 = math.log(beta2) if beta2 > 0 else -1e30
    buckets: dict = {}
    for i, (p, idx) in enumerate(zip(params, idxs)):
        if idx.numel():
            buckets.setdefault((p.dtype, idx.dtype, p.device), []).append(i)
    for (pdt, idt, device), members in buckets.items():
        if pdt not in _TL or idt not in (torch.int32, torch.int64):
            raise TypeError(f"params: unsupported parameter/index dtypes {pdt}/{idt}")
        gs = [grads[i].contiguous() for i in members]

        def table(ts, device=device):
            return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device=device)

        n = torch.tensor([idxs[i].numel() for i in members], dtype=torch.int64)
        nblocks = (n + block - 1) // block
        block_tensor = torch.repeat_interleave(torch.arange(len(members)), nblocks)
        first = torch.cumsum(nblocks, 0) - nblocks
        block_start = (torch.arange(int(nblocks.sum())) - first[block_tensor]) * block
        _sparse_adam_multi_kernel[(int(nblocks.sum()),)](
            table([params[i] for i in members]),
            table(gs),
            table([idxs[i] for i in members]),
            table([exp_avgs[i] for i in members]),
            table([exp_avg_sqs[i] for i in members]),
            table([ages[i] for i in members]),
            n.to(device),
            block_tensor.to(device),
            block_start.to(device),
            lr,
            beta1,
            beta2,
            lb1,
            lb2,
            eps,
            1.0 - lr * weight_decay,
            P_DTYPE=_TL[pdt],
            IDX_DTYPE=_TL[idt],
            BLOCK=block,
        )
