"""The benchmark cases at smoke size (the workspace smoke test runs them too; here the recorded
metrics are checked). Slow: every arm of the quality case trains."""

from __future__ import annotations

import json
import math

import pytest
from qcs.bench import SUITE

pytestmark = pytest.mark.slow


def _run(name, tmp_path, monkeypatch):
    from neurips25_core.cli import run_case

    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path / "cache"))
    case = next(c for c in SUITE.cases if c.name == name)
    return run_case(SUITE, case, "smoke", tmp_path / "out", log=lambda _m: None)


def test_quality_smoke_records_every_arm_with_its_baseline(tmp_path, monkeypatch):
    from qcs.peers import dsir_available

    results = _run("quality", tmp_path, monkeypatch)
    em = [r for r in results if r.metric == "exact_match"]
    arms = {r.params["arm"] for r in em}
    expected = {"full", "random", "perplexity", "ifd", "less", "rho1_random", "rho1_pool"}
    expected |= {"qcs_seq", "qcs"} | ({"dsir"} if dsir_available() else set())
    assert arms == expected
    assert all(r.baseline in ("random", "perplexity", "ifd", "dsir") for r in em)
    assert all(0.0 <= r.value <= 1.0 for r in em)
    metrics = {r.metric for r in results}
    assert {"test_loss", "wrong_kept", "filler_kept", "selection_cpu", "s_max_move"} <= metrics
    gaps = [r for r in results if r.metric.startswith("em_gap_vs_")]
    assert gaps and all(r.params["ci_low"] <= r.value <= r.params["ci_high"] for r in gaps)
    runs = json.loads((tmp_path / "out" / "quality_runs.json").read_text())
    assert any("s_histogram_0_to_1" in d for d in runs)


def test_selection_cost_smoke_records_qcs_against_less(tmp_path, monkeypatch):
    results = _run("selection_cost", tmp_path, monkeypatch)
    names = {r.metric for r in results}
    assert {"time", "qcs_cpu", "qcs_wall", "qcs_live_peak", "qcs_cpu_projected"} <= names
    for r in results:
        assert math.isfinite(r.value) and r.value > 0
        if r.metric.startswith("qcs_"):
            assert r.baseline == "less" and r.baseline_value > 0
