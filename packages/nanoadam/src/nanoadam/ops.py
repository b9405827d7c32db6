"""Public ops of nanoadam: the sparse Adam step with backend dispatch (torch on CPU, Triton on CUDA)."""

from __future__ import annotations

import torch

from neurips25_core.device import use_triton_for


def sparse_adam_step_torch(
    p, grad, idx, exp_avg, exp_avg_sq, age, *, lr, beta1, beta2, eps, weight_decay
):
    """In place: gather p, g at ``idx``; update compact m, v, age; scatter p (torch ops)."""
    flat = p.data.view(-1)
    sdt = exp_avg.dtype
    g = grad.reshape(-1).index_select(0, idx).to(sdt)
    w = flat.index_select(0, idx).to(sdt)
    age.add_(1)
    a = age.to(sdt)
    if weight_decay:
        w.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(g, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    bc1 = 1 - torch.pow(beta1, a)
    bc2 = 1 - torch.pow(beta2, a)
    denom = (exp_avg_sq / bc2).sqrt_().add_(eps)
    w.sub_(lr * (exp_avg / bc1) / denom)
    flat.index_copy_(0, idx, w.to(flat.dtype))


def sparse_adam_step(
    p, grad, idx, exp_avg, exp_avg_sq, age, *, lr, beta1, beta2, eps, weight_decay, backend="auto"
):
    """One sparse AdamW step on the entries ``idx`` (int64, unique) of ``p``, in place.

    ``backend``: ``"auto"`` (Triton for CUDA tensors with fp32 state, else torch), ``"torch"``,
    ``"triton"``.
    """
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend: expected 'auto', 'torch' or 'triton', got {backend!r}")
    if not p.is_contiguous():
        raise ValueError("p: expected a contiguous parameter")
    if grad.shape != p.shape:
        raise ValueError(f"grad: expected shape {tuple(p.shape)}, got {tuple(grad.shape)}")
    use = backend == "triton" or (
        backend == "auto" and exp_avg.dtype == torch.float32 and use_triton_for(p)
    )
    kw = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
    if use:
        from .kernels.sparse_adam import sparse_adam_step_triton

        sparse_adam_step_triton(p, grad, idx, exp_avg, exp_avg_sq, age, **kw)
    else:
        sparse_adam_step_torch(p, grad, idx, exp_avg, exp_avg_sq, age, **kw)
