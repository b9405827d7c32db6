"""Statistics, the LMMSE fit and the CCA bound, in float64."""

import pytest
import torch
from nbl import cca, lmmse
from nbl.stats import CovAccumulator, batch_stats

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close, randn


def _tanh_data(n=400, d=7, seed=0):
    x = randn(n, d, seed=seed, dtype=torch.float64) * 2 + 3
    m = randn(d, d, seed=seed + 1, dtype=torch.float64)
    y1 = torch.tanh(x @ m.T) + 0.1 * randn(n, d, seed=seed + 2, dtype=torch.float64)
    return x, y1


def test_affine_data_recovers_map():
    x = randn(300, 6, seed=0, dtype=torch.float64)
    m = randn(4, 6, seed=1, dtype=torch.float64)
    c = randn(4, seed=2, dtype=torch.float64)
    w, b = lmmse.fit(batch_stats(x, x @ m.T + c))
    assert_close(w, m, rtol=1e-10)
    assert_close(b, c, rtol=1e-10)


def test_residual_orthogonal_and_mse_closed_form():
    x, y1 = _tanh_data()
    s = batch_stats(x, y1)
    w, b = lmmse.fit(s)
    e = y1 - x @ w.T - b
    assert float(e.mean(0).abs().max()) < 1e-12
    assert float(((e.T @ (x - x.mean(0))) / len(x)).abs().max()) < 1e-12
    emp = float((e * e).sum(1).mean()) * len(x) / (len(x) - 1)
    assert abs(emp - lmmse.predicted_mse(s)) < 1e-10 * emp
    assert abs(lmmse.mse(s, w, b) - emp) < 1e-10 * emp


def test_residual_target_shifts_W_by_identity():
    x, y1 = _tanh_data()
    s = batch_stats(x, y1)
    w_attn, b_attn = lmmse.fit(s)
    w_res, b_res = lmmse.fit(s.residual())
    assert_close(w_res - torch.eye(7, dtype=torch.float64), w_attn, rtol=1e-10)
    assert_close(b_res, b_attn, rtol=1e-10)
    assert abs(lmmse.predicted_mse(s.residual()) - lmmse.predicted_mse(s)) < 1e-9
    ref = batch_stats(x, x + y1)
    assert_close(s.residual().cyy, ref.cyy, rtol=1e-12)
    # the score differs between targets
    assert abs(float((1 - cca.correlations(s, "attn") ** 2).sum()) - cca.report(s)["score"]) > 1e-6


def test_bound_chain_and_range():
    for seed in range(3):
        x, y1 = _tanh_data(seed=seed)
        r = cca.report(batch_stats(x, y1))
        assert r["mse"] <= r["bound_lmax"] * (1 + 1e-12) <= r["bound_trace"] * (1 + 1e-12)
        rho = cca.correlations(batch_stats(x, y1))
        assert float(rho.min()) >= 0 and float(rho.max()) <= 1
        assert bool((rho[:-1] >= rho[1:]).all())


def test_rho_invariant_to_affine_maps():
    x, y1 = _tanh_data()
    y = x + y1
    a = randn(7, 7, seed=5, dtype=torch.float64) + 3 * torch.eye(7, dtype=torch.float64)
    bm = randn(7, 7, seed=6, dtype=torch.float64) + 3 * torch.eye(7, dtype=torch.float64)
    rho = cca.correlations(batch_stats(x, y), "attn")
    rho2 = cca.correlations(batch_stats(x @ a.T + 1.5, y @ bm.T - 2.0), "attn")
    assert_close(rho2, rho, rtol=1e-10)


def test_streaming_equals_batch():
    x, y1 = _tanh_data(n=503)
    x = x + 1e3  # large mean: raw-sum accumulation would lose digits here
    ref = batch_stats(x, y1)
    perm = torch.randperm(503, generator=torch.Generator().manual_seed(0))
    parts = [CovAccumulator(7, 7) for _ in range(3)]
    for j, chunk in enumerate(perm.tensor_split(7)):
        parts[j % 3].update(
            x[chunk].float().double(), y1[chunk]
        )  # fp32→fp64 path, data exact in fp64
    # the float() round trip changes x; compare against the same rounded data
    xr = x.float().double()
    ref = batch_stats(xr, y1)
    acc = parts[0].merge(parts[1]).merge(parts[2])
    s = acc.finalize()
    for name in ("mean_x", "mean_y", "cxx", "cyx", "cyy"):
        assert_close(getattr(s, name), getattr(ref, name), rtol=1e-12)
    assert s.n == ref.n


def test_mask_excludes_rows():
    x, y1 = _tanh_data(n=50)
    mask = torch.arange(50) % 3 != 0
    acc = CovAccumulator(7, 7)
    acc.update(x.reshape(5, 10, 7), y1.reshape(5, 10, 7), mask.reshape(5, 10))
    ref = batch_stats(x[mask], y1[mask])
    assert_close(acc.finalize().cxx, ref.cxx, rtol=1e-12)


def _rank_stats(rank, world):
    x, y1 = _tanh_data(n=301)
    acc = CovAccumulator(7, 7)
    idx = torch.arange(301)
    acc.update(x[idx % world == rank], y1[idx % world == rank])
    acc.all_reduce()
    s = acc.finalize()
    return s.n, s.cxx, s.cyx, s.cyy, s.mean_x


def test_two_process_all_reduce_equals_single_process():
    res = run_distributed(_rank_stats, world_size=2)
    x, y1 = _tanh_data(n=301)
    ref = batch_stats(x, y1)
    for n, cxx, cyx, cyy, mx in res:
        assert n == 301
        assert_close(cxx, ref.cxx, rtol=1e-12)
        assert_close(cyx, ref.cyx, rtol=1e-12)
        assert_close(cyy, ref.cyy, rtol=1e-12)
        assert_close(mx, ref.mean_x, rtol=1e-12)


def test_bad_inputs():
    x, y1 = _tanh_data(n=6)
    with pytest.raises(ValueError, match="C_xx singular: add ridge or more tokens"):
        lmmse.fit(batch_stats(x, y1))
    w, _ = lmmse.fit(batch_stats(x, y1), ridge=1e-3)
    assert torch.isfinite(w).all()
    acc = CovAccumulator(7, 7)
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="x: activations contain NaN"):
        acc.update(bad, y1)
    with pytest.raises(ValueError, match="y: activations contain NaN"):
        acc.update(x, y1 * float("inf"))
    with pytest.raises(ValueError, match="x: expected shape"):
        acc.update(x[:, :3], y1)
    with pytest.raises(ValueError, match="ridge"):
        lmmse.fit(batch_stats(x, y1), ridge=-1.0)
    with pytest.raises(ValueError, match="target"):
        cca.correlations(batch_stats(x, y1), target="foo")
    assert acc.n == 0
