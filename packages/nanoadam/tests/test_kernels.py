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
