"""Public ops of nanoadam: the sparse Adam step with backend dispatch (torch on CPU, Triton on CUDA)."""

from __future__ import annotations

import math

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
    # 1 − β^age as −expm1(age·ln β): ``1 - beta2**age`` in fp32 loses ~1e-5 to cancellation
    bc1 = -torch.expm1(a * math.log(beta1)) if beta1 > 0 else torch.ones_like(a)
    bc2 = -torch.expm1(a * math.log(beta2)) if beta2 > 0 else torch.ones_like(a)
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


def sparse_adam_step_multi(
    params,
    grads,
    idxs,
    exp_avgs,
    exp_avg_sqs,
    ages,
    *,
    lr,
    beta1,
    beta2,
    eps,
    weight_decay,
    backend="auto",
):
    """:func:`sparse_adam_step` over lists of tensors: one Triton launch for all of them on CUDA.

    ``idxs[i]`` are unique flat indices into ``params[i]`` (int32 or int64). ``backend="auto"``
    takes the multi-tensor Triton kernel when every tensor is on CUDA with fp32 state, else loops
    over the torch step; ``"torch"`` and ``"triton"`` force one.

    >>> p = torch.zeros(6)
    >>> m, v, a = torch.zeros(2), torch.zeros(2), torch.zeros(2, dtype=torch.int32)
    >>> sparse_adam_step_multi(
    ...     [p],
    ...     [torch.ones(6)],
    ...     [torch.tensor([1, 4])],
    ...     [m],
    ...     [v],
    ...     [a],
    ...     lr=0.1,
    ...     beta1=0.9,
    ...     beta2=0.999,
    ...     eps=0.0,
    ...     weight_decay=0.0,
    ... )
    >>> p.tolist()
    [0.0, -0.10000000149011612, 0.0, 0.0, -0.10000000149011612, 0.0]
    """
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend: expected 'auto', 'torch' or 'triton', got {backend!r}")
    lists = dict(grads=grads, idxs=idxs, exp_avgs=exp_avgs, exp_avg_sqs=exp_avg_sqs, ages=ages)
    for name, seq in lists.items():
        if len(seq) != len(params):
            raise ValueError(
                f"{name}: expected {len(params)} tensors (one per param), got {len(seq)}"
            )
    for i, (p, g) in enumerate(zip(params, grads)):
        if not p.is_contiguous():
            raise ValueError(f"params: tensor {i} is not contiguous")
        if g.shape != p.shape:
            raise ValueError(
                f"grads: tensor {i} has shape {tuple(g.shape)}, expected {tuple(p.shape)}"
            )
    kw = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
    use = backend == "triton" or (
        backend == "auto"
        and len(params) > 0
        and all(m.dtype == torch.float32 for m in exp_avgs)
        and all(use_triton_for(p) for p in params)
    )
    if use:
        from .kernels.sparse_adam import sparse_adam_step_multi_triton

        sparse_adam_step_multi_triton(params, grads, idxs, exp_avgs, exp_avg_sqs, ages, **kw)
        return
    for p, g, idx, m, v, a in zip(params, grads, idxs, exp_avgs, exp_avg_sqs, ages):
        sparse_adam_step_torch(p, g, idx.long(), m, v, a, **kw)
