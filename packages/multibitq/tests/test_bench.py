"""The benchmark suite declares its cases and the speed case records a same-run baseline."""

from __future__ import annotations

import pytest
from multibitq.bench import SUITE

from neurips25_core.cli import run_case


def test_suite_cases():
    assert SUITE.name == "multibitq"
    assert [c.name for c in SUITE.cases] == [
        "correction_overhead",
        "epoch_cost",
        "reduced_reproduction",
    ]


def test_cost_model_matches_the_spec():
    from multibitq.bench import _cost_model

    assert _cost_model(0.8, 5) == pytest.approx(3.75)
    assert _cost_model(0.0, 10**9) == pytest.approx(1.0)


def test_correction_overhead_smoke_records_ours_against_joint(tmp_path):
    case = next(c for c in SUITE.cases if c.name == "correction_overhead")
    results = run_case(SUITE, case, "smoke", tmp_path, log=lambda _msg: None)
    by_impl = {r.params["impl"]: r for r in results}
    assert set(by_impl) == {"joint (no correction)", "ours (mean_var correction)"}
    ours = by_impl["ours (mean_var correction)"]
    assert ours.baseline == "joint (no correction)" and ours.value > 0 and ours.baseline_value > 0


def test_gpu_script_toy(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["correctness"]["ok"]
    assert [r["run"] for r in result["runs"]] == ["Any-Precision", "ours p=0.5", "ours p=0.8"]
    passes = [r["train_passes"] for r in result["runs"]]
    assert passes == [2 * 96, 2 * 48, 2 * 19]  # k = round((1 - p) n) per child, two children
    assert all(r["images_per_second"] > 0 for r in result["runs"])


def test_full_plan_is_the_issues():
    """--full: digits 30 epochs x 3 seeds with brevitas at 2/4/8 bits; synthetic 10k, 10 epochs, 1 seed."""
    from multibitq.bench import _jobs, _quality_runs, _quality_sizes

    digits, synthetic = _quality_sizes("full"), _quality_sizes("full", "synthetic")
    assert (digits["epochs"], digits["seeds"], digits["brevitas_bits"]) == (
        30,
        (0, 1, 2),
        (2, 4, 8),
    )
    assert (synthetic["n"], synthetic["epochs"], synthetic["seeds"]) == (10_000, 10, (0,))
    jobs = _jobs("full")
    assert [j[1:3] for j in jobs[:3]] == [("digits", s) for s in (0, 1, 2)]
    assert [j[3] for j in jobs[3:]] == [(n,) for n in _quality_runs("full", "synthetic")]
    assert _jobs("quick") == [("quick", "digits", 0, None)]


def test_synthetic_job_runs_at_smoke_size():
    from multibitq.bench import _quality_job

    rows = _quality_job(("smoke", "synthetic", 0, ("ours p=0.8", "random p=0.8")))
    assert set(rows) == {"ours p=0.8", "random p=0.8"}
    for row in rows.values():
        assert set(row["accuracy"]) == {2, 32} and set(row["unseen"]) == {3}
        assert row["train_passes"] == 2 * 60  # k = round(0.2 * 300) per child, two children
