"""The fitters recover planted laws; they refuse fits with too few points."""

import math

import numpy as np
import pytest
from hpscaling import estimate_b_crit, fit_power_law, fit_tau_law, fit_tau_law_seeds
from hpscaling.fit import power_law_slope_ci


def test_fit_power_law_recovers_planted_constants_under_noise():
    rng = np.random.default_rng(0)
    x = np.geomspace(5, 2000, 12)
    y = 1.084 * x**-0.527 * np.exp(rng.normal(0, 0.01, x.shape))
    c, m, r2 = fit_power_law(x, y)
    assert c == pytest.approx(1.084, rel=0.05)
    assert m == pytest.approx(-0.527, abs=0.01)
    assert 0.99 < r2 <= 1.0


def test_fit_power_law_weights_ignore_a_zero_weight_outlier():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    y = 3.0 * x**0.5
    y_bad = y.copy()
    y_bad[-1] *= 10
    c, m, _ = fit_power_law(x, y_bad, weights=[1, 1, 1, 1, 0])
    assert c == pytest.approx(3.0, rel=1e-12) and m == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize(
    ("x", "y", "weights", "name", "error"),
    [
        ([1, 2], [1, 2], None, "x", ValueError),
        ([1, 1, 1], [1, 2, 3], None, "x", ValueError),
        ([1, 2, 3], [1, 2], None, "y", ValueError),
        ([1, 2, -3], [1, 2, 3], None, "x", ValueError),
        ([1, 2, 3], [1, 0, 3], None, "y", ValueError),
        ([1, 2, 3], [1, 2, 3], [1, -1, 1], "weights", ValueError),
        ([[1, 2, 3]], [1, 2, 3], None, "x", ValueError),
        (["a", "b", "c"], [1, 2, 3], None, "x", TypeError),
    ],
)
def test_fit_power_law_bad_input(x, y, weights, name, error):
    with pytest.raises(error, match=name):
        fit_power_law(x, y, weights)


def _bowl_runs(cells, taus, kappa=0.05, c=1.084, m=-0.527, eta=3e-3):
    """Loss bowls L = L*(N, D) + κ(log τ − log τ_opt)² with τ_opt = c·TPP^m (the spec's planted data)."""
    runs = []
    for N, tpp, B in cells:
        D = tpp * N
        t_opt = c * tpp**m
        for tau in taus:
            lam = B / (eta * tau * D)
            loss = 2.0 + 10 * N**-0.2 + kappa * (math.log(tau) - math.log(t_opt)) ** 2
            runs.append({"N": N, "D": D, "B": B, "eta": eta, "lam": lam, "loss": loss})
        runs.append({"N": N, "D": D, "B": B, "eta": eta, "lam": 0.0, "loss": 9.0})  # ignored
    return runs


def test_fit_tau_law_recovers_planted_tau_law_and_law1_slope():
    cells = [
        (n, t, b) for n in (1e5, 4e5) for t in (5.0, 20.0, 80.0) for b in (512.0, 1024.0, 2048.0)
    ]
    taus = np.geomspace(0.01, 4.0, 9)
    fit = fit_tau_law(_bowl_runs(cells, taus))
    assert len(fit.cells) == len(cells)
    for cell in fit.cells:
        assert cell.tau_opt == pytest.approx(1.084 * cell.tpp**-0.527, rel=1e-9)
        assert not cell.extrapolated
    assert fit.c_tau == pytest.approx(1.084, rel=1e-9)
    assert fit.m_tau == pytest.approx(-0.527, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert len(fit.law1) == 6
    for entry in fit.law1:
        assert entry["slope"] == pytest.approx(1.0, rel=1e-9)


def test_law1_groups_batches_whose_D_differs_by_a_whole_step():
    # whole steps at B and 2B: D a fraction of a percent apart, as in the reduced reproduction
    cells = [(8e4, 5.0, 1024.0), (8e4, 5.0 * 1.0026, 2048.0), (8e4, 5.0 * 0.9990, 4096.0)]
    fit = fit_tau_law(_bowl_runs(cells, np.geomspace(0.05, 5.0, 7)))
    (entry,) = fit.law1
    assert entry["slope"] == pytest.approx(1.0, abs=1e-2)
    assert entry["std_log_tau_opt"] < 1e-2 < entry["std_log_lambda_opt"]
    assert fit_tau_law(_bowl_runs(cells, np.geomspace(0.05, 5.0, 7)), d_rtol=0.0).law1 == ()
    with pytest.raises(ValueError, match="d_rtol"):
        fit_tau_law(_bowl_runs(cells, [0.1, 1.0, 3.0]), d_rtol=2.0)


def test_fit_tau_law_flags_and_warns_on_an_optimum_outside_the_sweep():
    runs = _bowl_runs([(1e5, 20.0, 1024.0)], [1.0, 2.0, 4.0])  # τ_opt(20) = 0.22 < 1.0
    with pytest.warns(RuntimeWarning, match="extrapolated"):
        fit = fit_tau_law(runs, window=None)
    assert fit.cells[0].extrapolated
    assert fit.m_tau is None and fit.law1 == ()


def test_a_loss_falling_to_the_end_of_the_sweep_is_not_an_optimum():
    # monotone in log λ with curvature: a convex quadratic's vertex lands inside the range, but
    # the lowest loss is at the largest λ, so nothing is bracketed
    lams = [0.01, 0.1, 1.0]
    runs = [
        {"N": 1e5, "D": 2e6, "B": 1024.0, "eta": 3e-3, "lam": lam, "loss": loss}
        for lam, loss in zip(lams, [2.9, 2.45, 2.40], strict=True)
    ]
    with pytest.warns(RuntimeWarning, match="largest lam"):
        fit = fit_tau_law(runs)
    (cell,) = fit.cells
    assert 0.01 < cell.lambda_opt < 1.0 and cell.extrapolated and cell.best_lambda == 1.0


def test_fit_tau_law_needs_three_lambdas_per_cell():
    runs = _bowl_runs([(1e5, 20.0, 1024.0)], [0.1, 0.3])
    with pytest.raises(ValueError, match="at least 3"):
        fit_tau_law(runs)
    with pytest.raises(ValueError, match="missing field 'loss'"):
        fit_tau_law([{"N": 1, "D": 1, "B": 1, "eta": 1, "lam": 1}])
    with pytest.raises(ValueError, match="window"):
        fit_tau_law(runs, window=2)


def _b_crit_runs(b_crit=4096.0, d_min=1e7, batches=(256, 1024, 4096, 16384, 65536)):
    """Loss(D, B) = 2 + 40·(D_eff/D_min)^−0.3 with D_eff = D/(1 + B/B_crit): the McCandlish trade-off."""
    runs = []
    for b in batches:
        for d in np.geomspace(1e6, 1e10, 60):
            d_eff = d / (1 + b / b_crit)
            runs.append({"B": float(b), "D": float(d), "loss": 2.0 + 0.5 * (d_eff / d_min) ** -0.3})
    return runs


def test_estimate_b_crit_recovers_planted_value():
    fit = estimate_b_crit(_b_crit_runs(), target_loss=2.5)
    assert fit.B_crit == pytest.approx(4096.0, rel=0.02)
    assert fit.D_min == pytest.approx(1e7, rel=0.02)
    assert len(fit.points) == 5


def test_estimate_b_crit_needs_three_batches_reaching_the_target():
    runs = _b_crit_runs(batches=(256, 1024))
    with pytest.raises(ValueError, match="at least 3"):
        estimate_b_crit(runs, target_loss=2.5)
    with pytest.raises(ValueError, match="target_loss"):
        estimate_b_crit(_b_crit_runs(), target_loss=0.0)
    # D_eff = 100·D_min: the largest B would need 1.7e10 tokens, beyond the runs (1e10)
    fit = estimate_b_crit(_b_crit_runs(), target_loss=2.0 + 0.5 * 100.0**-0.3)
    assert [p[0] for p in fit.points] == [256.0, 1024.0, 4096.0, 16384.0]
    assert len(fit.notes) == 1 and "B=65536" in fit.notes[0]
    assert fit.B_crit == pytest.approx(4096.0, rel=0.02)


def _seeded(cells, taus, seeds, noise, rng):
    runs = []
    for seed in seeds:
        for r in _bowl_runs(cells, taus):
            if r["lam"] > 0:
                runs.append({**r, "seed": seed, "loss": r["loss"] + rng.normal(0, noise)})
    return runs


def test_fit_tau_law_seeds_recovers_the_planted_law_with_an_interval_that_covers_it():
    rng = np.random.default_rng(0)
    cells = [(1e5, t, 1024.0) for t in (10.0, 40.0, 160.0)]
    taus = np.geomspace(0.02, 3.0, 9)
    out = fit_tau_law_seeds(_seeded(cells, taus, (0, 1, 2), 0.002, rng), n_boot=60)
    assert out.fit.m_tau == pytest.approx(-0.527, abs=0.05)
    lo, hi = out.m_tau_ci
    assert lo < -0.527 < hi and hi - lo < 0.2
    rlo, rhi = out.m_tau_regression_ci
    assert rlo < out.fit.m_tau < rhi
    assert sorted(out.per_seed) == [0, 1, 2]
    assert all(f.m_tau == pytest.approx(-0.527, abs=0.1) for f in out.per_seed.values())
    assert set(out.seeds.values()) == {3} and out.boot_fits == 60
    assert all(ci is not None and ci[0] < ci[1] for ci in out.tau_opt_ci)


def test_fit_tau_law_seeds_without_noise_is_fit_tau_law_and_has_zero_width_intervals():
    cells = [(1e5, 20.0, b) for b in (512.0, 1024.0, 2048.0)]
    runs = [{**r, "seed": s} for s in (0, 1) for r in _bowl_runs(cells, np.geomspace(0.02, 3, 7))]
    out = fit_tau_law_seeds(runs, n_boot=20)
    (entry,), (ci,) = out.fit.law1, out.law1_ci
    assert entry["slope"] == pytest.approx(1.0, rel=1e-9)
    assert ci == pytest.approx((1.0, 1.0), rel=1e-9)
    assert out.fit.m_tau is None and out.m_tau_ci is None  # one TPP: no τ law


@pytest.mark.parametrize(
    ("kwargs", "runs", "name"),
    [
        ({"n_boot": 5}, None, "n_boot"),
        ({"level": 95}, None, "level"),
        ({}, [{"N": 1, "D": 1, "B": 1, "eta": 1, "lam": 1, "loss": 1, "seed": 0.5}], "seed"),
        ({}, [{"N": 1, "D": 1, "B": 1, "eta": 1, "lam": 1, "loss": 1}] * 2, "second run"),
    ],
)
def test_fit_tau_law_seeds_bad_input(kwargs, runs, name):
    with pytest.raises(ValueError, match=name):
        fit_tau_law_seeds(
            runs if runs is not None else _bowl_runs([(1e5, 20.0, 1e3)], [1, 2, 3]), **kwargs
        )


def test_power_law_slope_ci_is_a_point_on_an_exact_line_and_covers_a_noisy_one():
    x = np.geomspace(1, 100, 5)
    assert power_law_slope_ci(x, 2 * x**-0.5) == pytest.approx((-0.5, -0.5), abs=1e-9)
    rng = np.random.default_rng(1)
    lo, hi = power_law_slope_ci(x, 2 * x**-0.5 * np.exp(rng.normal(0, 0.05, 5)))
    assert lo < -0.5 < hi
    with pytest.raises(ValueError, match="x"):
        power_law_slope_ci([1, 2], [1, 2])


def test_seed_offsets_keep_an_unevenly_replicated_minimum_in_place():
    # seed 1 sits 0.3 higher everywhere and ran only the three λ left of the optimum: a plain
    # mean raises those points and pushes the minimum right; removing the level does not
    cells = [(1e5, 20.0, 1024.0)]
    taus = np.geomspace(0.02, 3.0, 9)
    base = [r for r in _bowl_runs(cells, taus) if r["lam"] > 0]
    lams = sorted(r["lam"] for r in base)
    extra = [{**r, "seed": 1, "loss": r["loss"] + 0.3} for r in base if r["lam"] in lams[2:5]]
    runs = [{**r, "seed": 0} for r in base] + extra
    tau_true = 1.084 * 20.0**-0.527
    fixed = fit_tau_law_seeds(runs, n_boot=10)
    assert fixed.fit.cells[0].tau_opt == pytest.approx(tau_true, rel=1e-9)
    plain = fit_tau_law_seeds(runs, n_boot=10, seed_offsets=False)
    assert abs(math.log(plain.fit.cells[0].tau_opt / tau_true)) > 0.1


def test_tpps_a_whole_step_apart_are_one_tpp_and_give_no_tau_law():
    cells = [(8e4, 20.0, 1024.0), (8e4, 20.0 * 1.0026, 2048.0), (8e4, 20.0 * 0.999, 4096.0)]
    fit = fit_tau_law(_bowl_runs(cells, np.geomspace(0.02, 3.0, 7)))
    assert fit.m_tau is None and len(fit.law1) == 1
