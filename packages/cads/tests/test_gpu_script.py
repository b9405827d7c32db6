"""benchmarks/gpu.py runs at toy size on the CPU and reports finite per-step times and ratios."""

import importlib.util
import math
from pathlib import Path

import pytest


def _script():
    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("cads_gpu_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_script_toy_mode_runs():
    out = _script().main(["--toy"])
    assert out["toy"] and out["device"] == "cpu"
    for key in ("cnn", "llama"):
        assert all(
            math.isfinite(out[key][k]) and out[key][k] > 0 for k in ("cads_s", "pbcs_s", "ratio")
        )


def test_gpu_script_checks_outer():
    with pytest.raises(SystemExit):
        _script().main(["--toy", "--outer", "0"])
