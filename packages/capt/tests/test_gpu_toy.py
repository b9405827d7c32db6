"""benchmarks/gpu.py at toy size on the CPU (no GPU is lent to this package)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


def test_gpu_script_runs_at_toy_size(tmp_path):
    pytest.importorskip("peft", reason="peft (the 'peers' extra) is not installed")
    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("capt_gpu_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gpu.json"
    assert module.main(["--toy", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    arms = results["speed"]["arms"]
    assert set(arms) == {"capt", "peft_pt8", "peft_lora8"}
    assert arms["capt"]["trainable"] == 2 * 64 and all(a["step_seconds"] > 0 for a in arms.values())
    assert set(results["speed"]["generate"]) == {"bare", "capt"}
    t1 = results["t1"]["arms"]
    assert set(t1) == {"capt", "peft_pt20", "peft_lora4"}
    assert all(0.0 <= a["test_accuracy"] <= 1.0 for a in t1.values())
