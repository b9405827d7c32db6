"""Triton kernels (interpreter on CPU) against the torch paths."""

from __future__ import annotations

import pytest
import torch
from dizo import ops

from neurips25_core.testing import assert_close, default_rtol, randn

pytest.importorskip("triton")

SIZES = (1, 63, 1000, 4097)


def _tensors(dtype, seed=0):
    return [randn(n, seed=seed + i).to(dtype) for i, n in enumerate(SIZES)]


def _z(block=None, seed=5):
    zs = [torch.zeros(n) for n in SIZES]
    if block is None:
        ops.perturb_(zs, seed, 1.0, backend="triton")
    else:
        from dizo.kernels import zo

        zo.perturb_(zs, seed, 1.0, block=block)
    return zs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_perturb_matches_torch(dtype):
    z = _z()
    x = _tensors(dtype)
    want = [(t.float() + 0.37 * zi).to(dtype) for t, zi in zip(x, z)]
    ops.perturb_(x, 5, 0.37, backend="triton")
    for got, exp in zip(x, want):
        assert_close(
            got.double(),
            exp.double(),
            rtol=default_rtol(torch.float32) if dtype == torch.float32 else default_rtol(dtype),
        )


def test_z_depends_on_seed_and_index_only():
    a, b = _z(), _z(block=128)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    z = torch.cat(a)
    assert abs(float(z.mean())) < 0.1 and abs(float(z.std()) - 1) < 0.1
    assert not torch.equal(torch.cat(_z(seed=6)), z)
    # global index: the second tensor's z continues the stream, it is not a copy of the first
    assert not torch.equal(a[1][:1], a[0][:1]) or SIZES[0] != 1


def test_perturb_restore_fp32():
    x = _tensors(torch.float32)
    orig = [t.clone() for t in x]
    for s in (1e-3, -2e-3, 1e-3):
        ops.perturb_(x, 9, s, backend="triton")
    assert max((a - b).abs().max().item() for a, b in zip(x, orig)) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_project_and_norms_match_torch(dtype):
    x = _tensors(dtype)
    a = [(t.float() + 0.1 * randn(t.numel(), seed=40 + i)).to(dtype) for i, t in enumerate(x)]
    ratios = [0.8, 1.0, 1.13, 1.2]
    y_t = [t.clone() for t in x]
    ops.project_(y_t, a, ratios, backend="torch")
    y_k = [t.clone() for t in x]
    ops.project_(y_k, a, ratios, backend="triton")
    for g, e in zip(y_k, y_t):
        assert_close(
            g.double(), e.double(), rtol=default_rtol(dtype) if dtype != torch.float32 else 1e-6
        )
    assert torch.equal(y_k[1], x[1])
    n_t = ops.displacement_norms(x, a, backend="torch")
    n_k = ops.displacement_norms(x, a, backend="triton")
    n_ref = ops.displacement_norms(
        [t.double() for t in x], [t.double() for t in a], backend="reference"
    )
    assert_close(n_k, n_ref, rtol=1e-5)
    assert_close(n_t, n_ref, rtol=1e-5)


@pytest.mark.slow
def test_mezo_on_triton_backend_trains():
    from dizo import MeZO, MeZOConfig

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    opt = MeZO(model, MeZOConfig(lr=5e-2, seed=1), backend="triton")
    losses = [opt.step(lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), (x, y)) for _ in range(60)]
    assert sum(losses[-10:]) < 0.7 * sum(losses[:10])
