"""Scaling-law fits: Table 4 gives Table 7/10 back; planted parametric fits are recovered; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from diloco.scaling import (
    PAPER,
    batch_vertex,
    fit_joint_power_law,
    fit_parametric,
    fit_power_law,
    leave_one_out,
    parametric_form,
    residual,
    wallclock,
)

SIZES = PAPER["sizes"]
T4 = PAPER["table4"]


@pytest.mark.parametrize("column", ["DP", 1, 2, 4, 8])
def test_table4_gives_table7_back(column):
    a, alpha = fit_power_law(SIZES, T4[column])
    pa, palpha = PAPER["table7"][column]
    assert abs(a - pa) / pa < 5e-3
    assert abs(alpha - palpha) < 5e-4


def test_dp_and_joint_fits_match_the_spec_numbers():
    a, alpha = fit_power_law(SIZES, T4["DP"])
    assert (round(a, 2), round(alpha, 4)) == (18.17, -0.0954)
    n, m, loss = [], [], []
    for k in (1, 2, 4, 8):
        n += SIZES
        m += [k] * len(SIZES)
        loss += T4[k]
    a, alpha, beta = fit_joint_power_law(n, m, loss)
    pa, palpha, pbeta = PAPER["table10"]["loss"]
    assert (round(a, 2), round(alpha, 4), round(beta, 4)) == (19.25, -0.0986, 0.0116)
    assert abs(a - pa) / pa < 5e-3 and abs(alpha - palpha) < 5e-4 and abs(beta - pbeta) < 5e-4


def test_leave_one_out_on_table4_is_small():
    out = leave_one_out(SIZES, T4["DP"])
    assert out["residual"] < 0.02  # paper Table 11: 0.012 averaged over M
    assert out["actual"] == [2.326]


def _grid():
    n = np.array([1e7, 3e7, 1e8, 3e8, 1e9, 3e9])
    m = np.array([1, 2, 4, 8])
    nn, mm = np.meshgrid(n, m)
    return nn.ravel(), mm.ravel().astype(float)


PLANTED = {
    1: [math.log(19.0), -0.1, 0.012],
    2: [math.log(40.0), -0.2, 0.02, math.log(1.5)],
    3: [math.log(30.0), -0.15, -0.004, math.log(1.2)],
    4: [math.log(50.0), -0.2, math.log(0.05), 0.5, math.log(1.5)],
}


@pytest.mark.parametrize(
    ("form", "starts"),
    [
        (1, 2),
        pytest.param(2, 8, marks=pytest.mark.slow),
        pytest.param(3, 8, marks=pytest.mark.slow),
        pytest.param(4, 8, marks=pytest.mark.slow),
    ],
)
def test_parametric_fits_recover_planted_parameters(form, starts):
    planted = PLANTED[form]
    n, m = _grid()
    loss = parametric_form(form, np.array(planted), n, m)
    fit = fit_parametric(n, m, loss, form, n_starts=starts, seed=0)
    pred = parametric_form(form, np.array(fit["params"]), n, m)
    assert np.max(np.abs(np.log(pred) - np.log(loss))) < 1e-4
    assert fit["holdout_residual"] < 1e-4
    np.testing.assert_allclose(fit["params"], planted, atol=2e-3, rtol=1e-2)


def test_batch_vertex_finds_the_parabola_minimum():
    b = np.array([4.0, 5.0, 6.0, 7.0])
    assert batch_vertex(b, 3.0 + 0.01 * (b - 5.4) ** 2) == pytest.approx(5.4)
    assert batch_vertex(b, [3.0, 2.9, 2.95, 3.1]) == pytest.approx(
        -np.polyfit(b, [3.0, 2.9, 2.95, 3.1], 2)[1]
        / (2 * np.polyfit(b, [3.0, 2.9, 2.95, 3.1], 2)[0])
    )
    assert batch_vertex(b, [3.0, 2.9, 2.8, 2.7]) == 7.0  # concave/monotone: best observed


def test_wallclock_dp_pays_cross_traffic_every_step():
    n, d, b = 2.4e9, 48e9, 2**20
    dp = wallclock(n, d, b, "dp", network="10Gbps")
    for h in (30, 100):
        dl = wallclock(n, d, b, "diloco", M=2, H=h, network="10Gbps")
        assert dl["total"] < dp["total"]
        # DP sends 2N(1-1/R) bytes-units per step, DiLoCo 2N(1-1/M) every H steps
        assert dp["cross_bytes"] / dl["cross_bytes"] == pytest.approx(
            2 * h * (1 - 1 / 256), rel=0.02
        )
    assert wallclock(n, d, b, "diloco", M=1, network="10Gbps")["cross_bytes"] == 0


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: fit_power_law([1e6, -1e7], [3.0, 2.0]), "N"),
        (lambda: fit_power_law([1e6, 1e7], [3.0, 0.0]), "y"),
        (lambda: fit_power_law([1e6, 1e7, 1e8], [3.0, 2.0]), "lengths"),
        (lambda: fit_joint_power_law([1e6, 1e7], [1, 2, 4], [3.0, 2.0]), "lengths"),
        (lambda: fit_joint_power_law([1e6, 1e7], [1, 1], [3.0, 2.0]), "N, M"),
        (lambda: fit_parametric([1e6, 1e7], [1, 2], [3.0, 2.0], 5), "form"),
        (lambda: fit_parametric([1e6, 1e7], [1, 2], [3.0, 2.0], 1), "training points"),
        (
            lambda: fit_parametric([1e6] * 4, [1, 2, 3, 4], [3.0] * 4, 1, huber_delta=0),
            "huber_delta",
        ),
        (lambda: batch_vertex([1.0, 2.0], [3.0, 2.0]), "three"),
        (lambda: residual([1.0], [-1.0]), "y_hat"),
        (lambda: wallclock(0, 1e9, 1e6, "dp"), "N"),
        (lambda: wallclock(1e9, 1e9, 1e6, "fsdp"), "algo"),
        (lambda: wallclock(1e9, 1e9, 1e6, "diloco", network="1Mbps"), "network"),
        (lambda: wallclock(1e9, 1e9, 1e6, "diloco", H=0), "H"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
