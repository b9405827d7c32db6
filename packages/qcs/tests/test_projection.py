"""Capped-simplex projection: sums, bounds, idempotence, KKT optimality, edge totals, masks."""

from __future__ import annotations

import itertools

import pytest
import torch
from qcs import project_capped_simplex


def _kkt_reference(x: torch.Tensor, total: float) -> torch.Tensor:
    """Brute force over all breakpoints: τ making Σ clamp(x − τ, 0, 1) = total, by dense search."""
    taus = torch.cat([x - 1, x]).sort().values
    f = lambda tau: (x - tau).clamp(0, 1).sum()  # noqa: E731
    for a, b in itertools.pairwise(taus):
        fa, fb = f(a), f(b)
        if fa >= total >= fb:
            tau = a if fa == fb else a + (fa - total) / (fa - fb) * (b - a)
            return (x - tau).clamp(0, 1)
    raise AssertionError("no bracket")


@pytest.mark.parametrize("method", ["sort", "bisect"])
@pytest.mark.parametrize("seed", range(4))
def test_sum_bounds_idempotent_and_kkt(method, seed):
    g = torch.Generator().manual_seed(seed)
    x = 2 * torch.randn(37, generator=g, dtype=torch.float64)
    total = float(torch.rand(1, generator=g)) * 37
    y = project_capped_simplex(x, total, method=method)
    assert abs(float(y.sum()) - total) <= 1e-6
    assert float(y.min()) >= 0 and float(y.max()) <= 1
    y2 = project_capped_simplex(y, total, method=method)
    torch.testing.assert_close(y2, y, rtol=0, atol=1e-6)
    torch.testing.assert_close(y, _kkt_reference(x, total), rtol=0, atol=1e-6)


def test_projection_is_the_nearest_feasible_point():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(12, generator=g, dtype=torch.float64)
    y = project_capped_simplex(x, 4.0)
    for _ in range(200):  # random feasible points are never closer
        z = project_capped_simplex(torch.rand(12, generator=g, dtype=torch.float64) * 3, 4.0)
        assert float((x - y).norm()) <= float((x - z).norm()) + 1e-12


@pytest.mark.parametrize("method", ["sort", "bisect"])
def test_totals_zero_and_full(method):
    x = torch.tensor([0.3, -2.0, 5.0, 0.7], dtype=torch.float64)
    assert project_capped_simplex(x, 0, method=method).tolist() == [0, 0, 0, 0]
    assert project_capped_simplex(x, 4, method=method).tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("method", ["sort", "bisect"])
def test_rows_masks_and_ties(method):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64)
    x[2] = 0.5  # all tied
    lengths = torch.tensor([7, 3, 5, 1, 4])
    mask = torch.arange(7)[None] < lengths[:, None]
    total = 0.5 * lengths.double()
    y = project_capped_simplex(x, total, mask=mask, method=method)
    torch.testing.assert_close(y.sum(-1), total, rtol=0, atol=1e-6)
    assert float(y[~mask].abs().sum()) == 0.0
    torch.testing.assert_close(y[2, :5], torch.full((5,), 0.5, dtype=torch.float64))
    for r in range(5):
        L = int(lengths[r])
        torch.testing.assert_close(
            y[r, :L], _kkt_reference(x[r, :L], float(total[r])), rtol=0, atol=1e-6
        )


def test_sort_and_bisect_agree_float32_large():
    x = torch.randn(3, 4000, generator=torch.Generator().manual_seed(0))
    y1 = project_capped_simplex(x, 200.0, method="sort")
    y2 = project_capped_simplex(x, 200.0, method="bisect")
    assert y1.dtype == torch.float32
    torch.testing.assert_close(y1, y2, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        y1.double().sum(-1), torch.full((3,), 200.0, dtype=torch.float64), rtol=0, atol=1e-3
    )
