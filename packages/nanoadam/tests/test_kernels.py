"""The Triton sparse_adam_step under the interpreter equals the torch path (1e-6)."""

from __future__ import annotations

import pytest
import torch
from nanoadam import select_indices, sparse_adam_step

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, randn

pytestmark = pytest.mark.skipif(not triton_usable(), reason="triton is not importable here")


@pytest.mark.parametrize(("n", "k", "wd"), [(3001, 0.1, 0.0), (777, 0.3, 0.05)])
def test_triton_equals_torch(n, k, wd):
    p0 = randn(n, seed=n)
    idx = select_indices(p0.abs(), k, 500)
    outs = []
    for backend in ("torch", "triton"):
        p = p0.clone()
        m = torch.zeros(idx.numel())
        v = torch.zeros(idx.numel())
        age = torch.zeros(idx.numel(), dtype=torch.int32)
        age[::3] = 4  # mixed ages
        m[::3], v[::3] = 0.01, 0.001
        for t in range(3):
            g = randn(n, seed=10 + t)
            sparse_adam_step(
                p,
                g,
                idx,
                m,
                v,
                age,
                lr=1e-2,
                beta1=0.9,
                beta2=0.999,
                eps=1e-8,
                weight_decay=wd,
                backend=backend,
            )
        outs.append((p, m, v, age))
    for a, b in zip(outs[1], outs[0]):
        if a.dtype == torch.int32:
            assert torch.equal(a, b)
        else:
            assert_close(a, b, rtol=1e-6)
    untouched = torch.ones(n, dtype=torch.bool)
    untouched[idx] = False
    assert torch.equal(outs[1][0][untouched], p0[untouched])


@pytest.mark.parametrize("beta1", [0.9, 0.0])
def test_multi_tensor_triton_equals_per_tensor_torch(beta1):
    """One launch over three tensors (int32 and int64 indices, odd sizes) equals the torch loop."""
    from nanoadam import sparse_adam_step_multi

    sizes = (3001, 517, 1)
    p0 = [randn(n, seed=n) for n in sizes]
    idx = [select_indices(p.abs(), 0.2, 700) for p in p0]
    idx[0] = idx[0].to(torch.int32)
    outs = []
    for backend in ("torch", "triton"):
        ps = [p.clone() for p in p0]
        ms = [torch.zeros(i.numel()) for i in idx]
        vs = [torch.zeros(i.numel()) for i in idx]
        ages = [torch.zeros(i.numel(), dtype=torch.int32) for i in idx]
        for t in range(3):
            gs = [randn(n, seed=100 * t + n) for n in sizes]
            sparse_adam_step_multi(
                ps,
                gs,
                idx,
                ms,
                vs,
                ages,
                lr=1e-2,
                beta1=beta1,
                beta2=0.999,
                eps=1e-8,
                weight_decay=0.01,
                backend=backend,
            )
        outs.append(ps + ms + vs + ages)
    for a, b in zip(outs[1], outs[0]):
        if a.dtype == torch.int32:
            assert torch.equal(a, b)
        else:
            assert_close(a, b, rtol=1e-6)
    for p, p_start, i in zip(outs[1][:3], p0, idx):
        untouched = torch.ones(p.numel(), dtype=torch.bool)
        untouched[i.long()] = False
        assert torch.equal(p[untouched], p_start[untouched])


def test_multi_tensor_bad_input():
    from nanoadam import sparse_adam_step_multi

    p = torch.zeros(4)
    kw = dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)
    with pytest.raises(ValueError, match="grads"):
        sparse_adam_step_multi([p], [], [torch.tensor([0])], [p[:1]], [p[:1]], [p[:1]], **kw)
    with pytest.raises(ValueError, match="backend"):
        sparse_adam_step_multi(
            [p], [p], [torch.tensor([0])], [p[:1]], [p[:1]], [p[:1]], backend="cuda", **kw
        )
