"""The suite declares its cases in every mode."""

import pytest
from nbl.bench import SUITE, _spearman


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "nbl"
    assert {
        "linearization_quality",
        "decode_step",
        "accumulator_throughput",
        "model_decode",
    } <= names
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names, mode


def test_spearman():
    assert _spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert _spearman([1, 2, 3], [3, 2, 1]) == -1.0


@pytest.mark.slow
def test_gpu_script_toy(tmp_path):
    """Slow under load (a subprocess importing transformers): run with -m slow."""
    import json
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
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert all(r["ok"] for r in res["correctness"]) and len(res["correctness"]) == 2
    assert {r["replaced"] for r in res["speed"]} == {0, 1, 2}
    assert all(r["decode_tokens_per_s"] > 0 for r in res["speed"])


def test_calibration_split_disjoint():
    from nbl.bench import calibration_split

    from neurips25_core.data import stdlib_corpus

    corpus = stdlib_corpus()
    split = calibration_split(corpus)
    cal, ev, train = set(split.train_files), set(split.val_files), set(corpus.train_files)
    assert cal and ev and not (cal & ev) and not (cal & train) and not (ev & train)
    assert split.train.numel() > 128 * 256 and split.val.numel() > 16 * 256
