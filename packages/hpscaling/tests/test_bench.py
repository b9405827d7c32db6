"""The suite's cases, its helpers, and benchmarks/gpu.py at toy size on CPU."""

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
from hpscaling.bench import SUITE, curve_spread

GPU_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_declares_every_case_of_the_issue():
    names = {c.name for c in SUITE.cases}
    assert names == {
        "harness_speed",
        "tau_invariance",
        "tau_vs_tpp",
        "recommender",
        "law_vs_search",
    }
    assert all("smoke" in c.modes for c in SUITE.cases)


def test_curve_spread_is_zero_for_identical_curves_and_none_without_overlap():
    same = {1: ([0.1, 1.0], [2.0, 3.0]), 2: ([0.1, 1.0], [2.0, 3.0])}
    assert curve_spread(same) == pytest.approx(0.0)
    shifted = {1: ([0.1, 1.0], [2.0, 3.0]), 2: ([0.1, 1.0], [2.2, 3.2])}
    assert curve_spread(shifted) == pytest.approx(0.0)  # only the level differs
    steeper = {1: ([0.1, 1.0], [2.0, 3.0]), 2: ([0.1, 1.0], [2.0, 3.2])}
    assert curve_spread(steeper) == pytest.approx(0.05)
    assert curve_spread({1: ([0.1, 0.2], [1, 2]), 2: ([1.0, 2.0], [1, 2])}) is None


def test_recommender_case_matches_worked_values(tmp_path):
    from neurips25_core.cli import run_case

    case = next(c for c in SUITE.cases if c.name == "recommender")
    results = run_case(SUITE, case, "smoke", tmp_path, log=lambda _m: None)
    worked = [r for r in results if r.baseline == "paper worked value"]
    assert len(worked) == 8
    assert all(abs(r.ratio - 1) < 5e-3 for r in worked)


def test_gpu_script_toy_mode(tmp_path):
    spec = importlib.util.spec_from_file_location("hpscaling_gpu", GPU_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--toy", "--out", str(tmp_path), "--budget-s", "1e9"])
    saved = json.loads((tmp_path / "gpu_tau_invariance.json").read_text())
    assert saved["device"] == "cpu" and len(saved["plan"]) == 2
    assert len(result["runs"]) == sum(len(v) for v in result["plan"].values())
    assert all(r["val_loss"] > 0 for r in result["runs"])
    # the planner keeps >= 3 τ per kept B and drops the smallest B first
    plan = module.plan({"taus": (1, 2, 3, 4, 5), "budget_s": 7.0}, {2: 5.0, 4: 1.0, 8: 1.0})
    assert plan == {4: [2, 3, 4], 8: [2, 3, 4]}
    plan = module.plan({"taus": (1, 2, 3, 4, 5), "budget_s": 10.0}, {2: 5.0, 4: 1.0, 8: 1.0})
    assert plan == {4: [1, 2, 3, 4, 5], 8: [1, 2, 3, 4, 5]}


def _grid_runs(losses, cell=16, seed=0):
    from hpscaling.experiment import RunSpec

    taus = [0.1, 0.14, 0.2, 0.28, 0.4, 0.57, 0.8]
    out = []
    for tau, loss in zip(taus, losses, strict=True):
        spec = RunSpec(hidden=cell, heads=2, batch=4, tpp=1.0, tau=tau, seed=seed)
        out.append({"tau": tau, "val_loss": loss, "spec": dataclasses.asdict(spec)})
    return out


def test_replicas_take_the_window_around_each_minimum_and_stay_inside_the_grid():
    from hpscaling.bench import _replicas

    inner = _grid_runs([5, 4, 3, 2, 3, 4, 5])  # minimum at τ = 0.28
    edge = _grid_runs([1, 2, 3, 4, 5, 6, 7], cell=8)  # minimum at the grid's lowest τ
    specs = _replicas(inner + edge, (1, 2), 3, lambda r: r["spec"]["hidden"])
    got = sorted((s.hidden, s.tau, s.seed) for s in specs)
    want = sorted(
        [(16, t, s) for t in (0.2, 0.28, 0.4) for s in (1, 2)]
        + [(8, t, s) for t in (0.1, 0.14, 0.2) for s in (1, 2)]
    )
    assert got == want


def test_workers_come_from_the_environment_and_bad_values_are_refused(monkeypatch):
    from hpscaling.bench import _workers

    monkeypatch.delenv("HPSCALING_WORKERS", raising=False)
    assert _workers() == 1
    monkeypatch.setenv("HPSCALING_WORKERS", "2")
    assert _workers() == 2
    for bad in ("0", "two"):
        monkeypatch.setenv("HPSCALING_WORKERS", bad)
        with pytest.raises(ValueError, match="HPSCALING_WORKERS"):
            _workers()
