"""The benchmark suite is declared, and the GPU script runs at toy size (interpreter on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pdssm.bench import SUITE

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_cases():
    names = {c.name: c for c in SUITE.cases}
    assert SUITE.name == "pdssm"
    assert {"s3_state_tracking", "a4_state_tracking", "fsa_tasks", "scan_speed"} <= set(names)
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == set(names), mode


def test_gpu_script_toy(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    backends = {r["backend"] for r in result["correctness"]}
    assert backends == {"sequential", "torch", "triton", "triton_chunked"}
    assert all(r["ok"] for r in result["correctness"])
    assert result["speed"] and result["speed"][0]["triton_ms"] > 0
