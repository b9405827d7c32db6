"""The suite's cases, the training run spec, and ``benchmarks/gpu.py --toy`` (on CPU)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from diloco.bench import SUITE
from diloco.training import RunSpec

GPU_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_declares_quality_and_speed_in_every_mode():
    cases = {c.name: c for c in SUITE.cases}
    assert SUITE.name == "diloco"
    assert cases["quality"].kind == "quality" and cases["speed"].kind == "speed"
    for case in cases.values():
        assert set(case.modes) == {"smoke", "quick", "full"}


def test_run_spec_derives_steps_from_twenty_tokens_per_parameter():
    spec = RunSpec(hidden=16, batch=32, seq_len=128)
    assert spec.total_steps == round(20 * spec.parameters / (32 * 128))
    rounded = RunSpec(hidden=16, batch=32, seq_len=128, steps_multiple=30)
    assert rounded.total_steps % 30 == 0 and abs(rounded.total_steps - spec.total_steps) <= 15
    assert RunSpec(hidden=16, batch=64, steps_multiple=100).total_steps == 100  # at least one H
    assert RunSpec(algo="dp", dp_ranks=2).world == 2 and RunSpec(replicas=4).world == 4


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"algo": "fsdp"}, "algo"),
        ({"batch": 30, "replicas": 4}, "batch"),
        ({"inner_lr": 0.0}, "inner_lr"),
        ({"steps_multiple": 0}, "steps_multiple"),
    ],
)
def test_run_spec_rejects_bad_values(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RunSpec(**kwargs)


def test_gpu_script_toy_mode_runs_on_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("diloco_gpu_script", GPU_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--toy", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["device"] == "cpu" and len(saved["outer_step"]) == 2
    assert {r["label"] for r in out["ladder"]} == {"DP", "M=2"}
    assert all(r["val_loss"] > 0 and r["seconds"] > 0 for r in out["ladder"])
