"""``benchmarks/gpu.py --toy`` runs end to end (on CPU without a GPU) and its checks pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_gpu_script_toy(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["toy"] and result["cost"][0]["ok"] and result["selection"]["ok"]
    c = result["cost"][0]
    assert c["rollout_same_start"] and c["qcs_outer_step_s"] > 0 and c["less_features_s"] > 0
    assert 0.0 <= result["selection"]["qcs"]["exact_match"] <= 1.0
