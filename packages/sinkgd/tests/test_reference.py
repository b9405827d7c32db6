"""The SR-Sinkhorn fixed point, as the paper states it, checked on the float64 reference and the torch path."""

import itertools
import math

import pytest
import sinkgd
import torch
from sinkgd import reference

from neurips25_core.testing import assert_close, randn

SHAPES = [(1, 7), (9, 1), (5, 5), (13, 37), (64, 64), (130, 47)]


def lognormal_scaled(m, n, seed):
    """A Gaussian matrix with log-normal row and column scales (badly balanced on purpose)."""
    g = torch.Generator().manual_seed(seed + 1)
    rows = torch.exp(2 * torch.randn(m, 1, generator=g, dtype=torch.float64))
    cols = torch.exp(2 * torch.randn(1, n, generator=g, dtype=torch.float64))
    return randn(m, n, seed=seed, dtype=torch.float64) * rows * cols


def row_dev(x):
    n = x.shape[-1]
    return ((x.norm(dim=-1) - math.sqrt(n)).abs() / math.sqrt(n)).max().item()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["gaussian", "lognormal"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_column_norms_and_frobenius_are_exact(shape, kind, backend):
    m, n = shape
    g = (
        randn(m, n, seed=3, dtype=torch.float64)
        if kind == "gaussian"
        else lognormal_scaled(m, n, 3)
    )
    x = sinkgd.sr_sinkhorn(g.float(), num_iters=5, backend=backend)
    assert x.dtype == torch.float32
    col = x.double().norm(dim=0)
    assert ((col - math.sqrt(m)).abs() / math.sqrt(m)).max().item() <= 1e-5
    assert abs(x.double().norm().item() - math.sqrt(m * n)) / math.sqrt(m * n) <= 1e-5


@pytest.mark.parametrize("shape", [(64, 64), (128, 256), (512, 128), (37, 101)])
def test_row_norms_converge_on_gaussian_inputs(shape):
    g = randn(*shape, seed=11, dtype=torch.float64)
    devs = [row_dev(reference.sr_sinkhorn(g, num_iters=L)) for L in (1, 2, 3, 5, 10, 50)]
    assert devs[3] <= 1e-4, devs  # L = 5
    assert devs[-1] <= 1e-5, devs  # L = 50
    for a, b in itertools.pairwise(devs):
        assert b <= a * (1 + 1e-9) + 1e-15, devs  # non-increasing in L
    # the torch fp32 path sees the same convergence
    assert row_dev(sinkgd.sr_sinkhorn(g.float(), num_iters=5, backend="torch").double()) <= 1e-4


def test_row_norms_converge_on_lognormal_scaled_inputs():
    g = lognormal_scaled(96, 160, seed=5)
    devs = {L: row_dev(reference.sr_sinkhorn(g, num_iters=L)) for L in (1, 5, 10, 30)}
    assert devs[1] > 0.1  # one iteration is far from balanced here
    assert devs[10] <= 1e-5
    assert devs[30] <= 1e-10


@pytest.mark.parametrize("num_iters", [1, 3, 5])
def test_equals_classical_sinkhorn_knopp_on_squares(num_iters):
    m, n = 23, 41
    g = randn(m, n, seed=2, dtype=torch.float64)
    u, v = reference.sinkhorn_knopp(g * g, row_sum=n, col_sum=m, num_iters=num_iters)
    expected = u.sqrt()[:, None] * g * v.sqrt()[None, :]
    assert_close(reference.sr_sinkhorn(g, num_iters), expected, rtol=1e-12)
    assert_close(sinkgd.sr_sinkhorn(g, num_iters, backend="torch"), expected, rtol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_invariant_to_scale_and_permutations_and_sign_preserving(backend):
    m, n = 19, 33
    g = randn(m, n, seed=4, dtype=torch.float64)
    x = sinkgd.sr_sinkhorn(g, backend=backend)
    for c in (1e-3, 7.0, 1e4):
        assert_close(sinkgd.sr_sinkhorn(c * g, backend=backend), x, rtol=1e-12)
    pr = torch.randperm(m, generator=torch.Generator().manual_seed(0))
    pc = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    assert_close(sinkgd.sr_sinkhorn(g[pr][:, pc], backend=backend), x[pr][:, pc], rtol=1e-12)
    assert torch.equal(torch.sign(x), torch.sign(g))
    # negating the gradient negates the update
    assert_close(sinkgd.sr_sinkhorn(-g, backend=backend), -x, rtol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_zero_rows_columns_and_zero_gradient_give_no_nan(backend):
    g = randn(11, 17, seed=6)
    g[3] = 0
    g[:, 5] = 0
    g[:, 16] = 0
    x = sinkgd.sr_sinkhorn(g, num_iters=10, backend=backend)
    assert torch.isfinite(x).all()
    assert (x[3] == 0).all() and (x[:, 5] == 0).all() and (x[:, 16] == 0).all()
    live = x[torch.arange(11) != 3][:, [j for j in range(17) if j not in (5, 16)]]
    assert_close(live.norm(dim=0), torch.full((15,), math.sqrt(11.0)), rtol=1e-5)
    z = sinkgd.sr_sinkhorn(torch.zeros(4, 6), backend=backend)
    assert torch.equal(z, torch.zeros(4, 6))


def test_hand_computed_3x4_step():
    # One iteration on a 3×4 gradient, worked by hand:
    # rows → norm √4 = 2: [2,0,0,0], [0,2,0,0], [0,0,3,4]·2/5 = [0,0,1.2,1.6];
    # columns → norm √3: every non-zero column has one entry, which becomes √3.
    g = torch.tensor([[1.0, 0, 0, 0], [0, -2.0, 0, 0], [0, 0, 3.0, 4.0]], dtype=torch.float64)
    s3 = math.sqrt(3)
    expected_x = torch.tensor([[s3, 0, 0, 0], [0, -s3, 0, 0], [0, 0, s3, s3]], dtype=torch.float64)
    for backend in ("reference", "torch"):
        assert_close(sinkgd.sr_sinkhorn(g, num_iters=1, backend=backend), expected_x, rtol=1e-15)
    w = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
    w.grad = g.clone()
    opt = sinkgd.SinkGD([w], lr=0.1, num_iters=1, weight_decay=0.5)
    opt.step()
    # decoupled decay: W (1 − 0.1·0.5) − 0.1·X
    assert_close(
        w.detach(), 0.95 * torch.ones(3, 4, dtype=torch.float64) - 0.1 * expected_x, rtol=1e-15
    )
    # a dense 2×2 with L = 1: rows [3,4]/5·√2 and [1,0]·√2, then columns to √2
    g2 = torch.tensor([[3.0, 4.0], [1.0, 0.0]], dtype=torch.float64)
    r = torch.tensor([[0.6, 0.8], [1.0, 0.0]], dtype=torch.float64) * math.sqrt(2)
    expected2 = r / r.norm(dim=0, keepdim=True) * math.sqrt(2)
    assert_close(sinkgd.sr_sinkhorn(g2, num_iters=1, backend="torch"), expected2, rtol=1e-15)
    assert_close(
        expected2,
        torch.tensor(
            [[0.6 / math.sqrt(1.36), 1.0], [1 / math.sqrt(1.36), 0.0]], dtype=torch.float64
        )
        * math.sqrt(2),
        rtol=1e-15,
    )
