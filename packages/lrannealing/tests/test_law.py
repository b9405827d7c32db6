"""The law, its fit and the baselines: recovery, invariance, Huber, determinism, gradients."""

import numpy as np
import pytest
from lrannealing import (
    Curve,
    ForwardOnlyLaw,
    LRAnnealingLaw,
    MultiPowerLaw,
    StepPowerLaw,
    evaluate,
    fit,
    schedules,
)
from lrannealing import law as law_module
from lrannealing import reference as ref

TRUTH = LRAnnealingLaw(L0=2.5, A=0.4, C=1.5, alpha=0.45)
T = 20_000
STEPS = np.arange(1000, T + 1, 1000)  # the reference's points


def _curves(law, names=("constant", "cosine"), noise=0.0, scale=1.0, seed=0, peak=2e-4):
    rng = np.random.default_rng(seed)
    build = {
        "constant": lambda: schedules.constant(T, peak),
        "cosine": lambda: schedules.cosine(T, peak),
        "wsd": lambda: schedules.wsd(T, peak, decay_frac=0.2),
        "8-1-1": lambda: schedules.multistep(T, peak),
    }
    out = []
    for name in names:
        lrs = build[name]()
        loss = law.predict(lrs, STEPS) * (1 + noise * rng.standard_normal(STEPS.size))
        out.append(Curve(STEPS, loss, lrs * scale, name=name))
    return out


def test_recovery_predicts_wsd_and_multistep_within_0p3_percent():
    fitted = fit(_curves(TRUTH, noise=0.002)).law
    for held in _curves(TRUTH, names=("wsd", "8-1-1")):
        assert evaluate(fitted, held)["mape"] < 0.3, held.name


def test_rescaling_every_lr_moves_predictions_by_less_than_1e6():
    grid = {"L0": (0.1, 2.1), "A": (1.0, 22.0), "C": (1.0,), "alpha": (0.4, 0.8)}
    base = fit(_curves(TRUTH, noise=0.002), init_grid=grid).law
    held = schedules.wsd(T, 2e-4)
    for c in (1e-3, 37.0):
        scaled = fit(_curves(TRUTH, noise=0.002, scale=c), init_grid=grid).law
        a, b = base.predict(held, STEPS), scaled.predict(held * c, STEPS)
        assert np.max(np.abs(a - b) / b) < 1e-6, c


def test_huber_and_objective_match_a_hand_computed_three_point_case():
    # residuals log(obs) − log(pred): 0.0005 (quadratic), −0.002 and 0.01 (linear), δ = 1e-3
    r = np.array([0.0005, -0.002, 0.01])
    hand = 0.5 * 0.0005**2 + (1e-3 * 0.002 - 0.5e-6) + (1e-3 * 0.01 - 0.5e-6)
    assert hand == pytest.approx(1.1125e-05, rel=1e-12)
    value, derivative = law_module._huber(r, 1e-3)
    assert value == pytest.approx(hand, rel=1e-12)
    np.testing.assert_allclose(derivative, [0.0005, -1e-3, 1e-3])
    np.testing.assert_allclose(ref.huber(r, 1e-3).sum(), hand, rtol=1e-12)
    pred = np.array([2.0, 3.0, 4.0])
    obs = pred * np.exp(r)
    assert ref.huber_log_objective(obs, pred, 1e-3) == pytest.approx(hand, rel=1e-9)
    # the fit's objective on the same three points, through a law that predicts `pred`
    f = {"s1": np.ones(3), "s2": -pred + 1.0}
    got = law_module._objective(
        np.array([1.0, 0.0, 1.0, 0.0]), LRAnnealingLaw, [f], np.log(obs), 1e-3, False
    )
    assert got == pytest.approx(hand, rel=1e-9)


def test_results_are_identical_across_n_jobs():
    grid = {"L0": (0.1, 2.1), "A": (1.0, 22.0), "C": (1.0,), "alpha": (0.4, 0.8)}
    curves = _curves(TRUTH, noise=0.002)
    one = fit(curves, init_grid=grid, n_jobs=1)
    two = fit(curves, init_grid=grid, n_jobs=2)
    assert one.law == two.law and one.objective == two.objective


@pytest.mark.parametrize("law_cls", [LRAnnealingLaw, ForwardOnlyLaw, StepPowerLaw, MultiPowerLaw])
def test_analytic_gradient_matches_finite_differences(law_cls):
    from scipy.optimize import approx_fprime

    curves = _curves(TRUTH, names=("constant", "wsd", "8-1-1"), noise=0.01)
    unit = law_module._unit(curves)
    feats = [law_cls._features(c, unit, step_unit=4.0 / (T + 1)) for c in curves]
    log_obs = np.log(np.concatenate([c.loss for c in curves]))
    theta = {
        LRAnnealingLaw: [2.2, 0.5, 0.2, 0.4],
        ForwardOnlyLaw: [2.2, 0.5, 0.4],
        StepPowerLaw: [2.2, 0.5, 0.4],
        MultiPowerLaw: [2.2, 0.5, 0.4, 300.0, 1.5, 0.6, 0.4],
    }[law_cls]
    theta = np.array(theta)
    for delta in (1e-3, 1.0):  # the linear (outlier) and the quadratic branch of the Huber loss
        _, grad = law_module._objective(theta, law_cls, feats, log_obs, delta, True)

        def f(x, delta=delta):
            return law_module._objective(x, law_cls, feats, log_obs, delta, False)

        numeric = approx_fprime(theta, f, 1e-7 * np.maximum(np.abs(theta), 1e-3))
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6 * np.abs(grad).max())


def test_finite_difference_fit_reaches_the_analytic_fit():
    curves = _curves(TRUTH, noise=0.002)
    grid = {"L0": (0.1, 2.1), "A": (1.0, 22.0), "C": (1.0,), "alpha": (0.4,)}
    a = fit(curves, init_grid=grid, gradient="analytic")
    f = fit(curves, init_grid=grid, gradient="finite")
    assert f.objective == pytest.approx(a.objective, rel=1e-3)


def test_multi_power_law_matches_its_definition():
    lrs = schedules.multistep(300, 3e-3, warmup=20)
    lrs[150:170] = np.linspace(3e-3, 1e-3, 20)
    steps = np.array([25, 60, 151, 169, 240, 299, 300])
    law = MultiPowerLaw(L0=2.0, A=0.3, alpha=0.5, B=400.0, C=2.0, beta=0.6, gamma=0.4)
    expect = ref.mpl_loop(lrs, steps, 2.0, 0.3, 0.5, 400.0, 2.0, 0.6, 0.4, warmup_steps=20)
    np.testing.assert_allclose(law.predict(lrs, steps, warmup_steps=20), expect, rtol=1e-12)


def test_forward_only_and_step_power_coincide_on_a_constant_lr():
    lrs = schedules.constant(T, 2e-4)
    a = ForwardOnlyLaw(L0=2.0, A=0.5, alpha=0.4).predict(lrs, STEPS)
    b = StepPowerLaw(L0=2.0, A=0.5 * 2e-4**-0.4, alpha=0.4).predict(lrs, STEPS)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_the_law_beats_the_simple_baselines_on_its_own_data():
    curves = _curves(TRUTH, noise=0.002)
    held = _curves(TRUTH, names=("wsd", "8-1-1"))
    ours = fit(curves).law
    for cls in (ForwardOnlyLaw, StepPowerLaw):
        other = cls.fit(curves).law
        for c in held:
            assert evaluate(ours, c)["mape"] < evaluate(other, c)["mape"], (cls.__name__, c.name)


def test_decay_grid_keeps_the_best_objective():
    grid = {"L0": (0.1, 2.1), "A": (1.0, 22.0), "C": (1.0,), "alpha": (0.4,)}
    result = fit(_curves(TRUTH, noise=0.002), decay="grid", init_grid=grid)
    assert set(result.decay_objectives) == {0.99, 0.995, 0.999, 0.9995}
    assert result.objective == min(result.decay_objectives.values())
    assert result.law.decay == min(result.decay_objectives, key=result.decay_objectives.get)


@pytest.mark.parametrize(
    "law",
    [
        TRUTH,
        ForwardOnlyLaw(2.0, 0.4, 0.5),
        StepPowerLaw(2.0, 3.0, 0.5),
        MultiPowerLaw(2.0, 0.3, 0.5, 400.0, 2.0, 0.6, 0.4),
    ],
)
def test_to_dict_round_trip(law):
    import json

    data = json.loads(json.dumps(law.to_dict()))
    assert type(law).from_dict(data) == law
    with pytest.raises(ValueError, match="data"):
        (StepPowerLaw if not isinstance(law, StepPowerLaw) else LRAnnealingLaw).from_dict(data)


def test_fit_result_metrics():
    result = fit(_curves(TRUTH, noise=0.0))
    assert result.r2 > 0.999999 and result.starts == 54
    assert set(result.mape) == {"constant", "cosine"} and max(result.mape.values()) < 1e-3
