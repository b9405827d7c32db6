"""benchmarks/gpu.py runs at toy size on the CPU and reports finite per-step times and ratios, and
finite bits per byte and seconds for every language arm."""

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
    lang = out["language"]
    assert lang["budget"] == 5 and lang["seeds"] == [0] and lang["workers"] == 1
    assert {"uniform", "size_proportional", "best_single", "cads_s"} <= set(lang["arms"])
    for arm, row in lang["arms"].items():
        for key in ("test_bpb", "val_bpb", "seconds", "select_s"):
            assert len(row[key]) == 1 and all(math.isfinite(v) and v >= 0 for v in row[key]), arm
        for key in ("test_bpb", "val_bpb"):
            assert 0 < row[key][0] < 16, arm  # bits per byte of a barely trained byte model
            assert row[f"{key}_mean"] == row[key][0], arm
        assert row["seconds"][0] >= row["select_s"][0], arm


def test_gpu_script_checks_outer():
    with pytest.raises(SystemExit):
        _script().main(["--toy", "--outer", "0"])
    with pytest.raises(SystemExit):
        _script().main(["--toy", "--language-workers", "0"])


@pytest.mark.slow
def test_gpu_script_language_worker_process():
    """The GPU path runs each language seed in a worker process (``--language-workers``); at toy
    size on the CPU the one seed goes through that process and comes back as the in-process run."""
    script = _script()
    spawned = script.language(True, "cpu", 2)
    inline = script.language(True, "cpu", 1)
    assert spawned["arms"].keys() == inline["arms"].keys()
    for arm, row in spawned["arms"].items():
        assert row["test_bpb"] == inline["arms"][arm]["test_bpb"], arm
        assert row["val_bpb"] == inline["arms"][arm]["val_bpb"], arm
