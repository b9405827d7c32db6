"""The benchmark suite is declared and its helpers work; the GPU script runs at toy size."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from tfla.bench import SUITE, _peak_memory, _time, cpu_time

from neurips25_core.device import triton_usable


def test_suite_declares_speed_and_quality_cases():
    kinds = {c.name: c.kind for c in SUITE.cases}
    assert kinds == {
        "speed_vs_length": "speed",
        "chunk_size_sweep": "speed",
        "lm_quality": "quality",
    }
    assert SUITE.name == "tfla"


def test_cpu_timer_and_methods_run():
    assert cpu_time(lambda: sum(range(1000)), warmup=0, min_time=0.0) >= 0.0
    for method in ("chunkwise", "parallel", "recurrent"):
        assert _time(method, 32, backward=True, min_time=0.0) > 0.0


def test_peak_memory_probe_sees_quadratic_memory():
    chunk, parallel = _peak_memory([("chunkwise", 1024, True), ("parallel", 1024, True)])
    # The parallel form holds several (H, S, S) float32 matrices (16 MiB each here).
    assert parallel > 16 * 2**20 and chunk < parallel


def test_gpu_script_runs_at_toy_size(tmp_path):
    if not triton_usable():
        pytest.skip("needs triton with a GPU or TRITON_INTERPRET=1")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("tfla_gpu_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    result = mod.main(["--toy", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["info"]["toy"] is True
    for row in result["correctness"]:
        bound = 1e-5 if row["dtype"] == "float32" else 1.6e-2
        errs = {k: v for k, v in row.items() if k in ("h", "dq", "dk", "dv", "di", "df")}
        assert all(e <= bound for e in errs.values()), row
    kernels = {r["kernel"] for r in result["constant_tokens"]}
    assert {
        "mLSTMexp TFLA cs16",
        "mLSTMsig TFLA cs32",
        "mLSTMexp limit_chunk cs64",
        "torch SDPA causal",
        "mLSTMexp torch chunkwise cs64",
    } <= kernels
    assert all(r["ms"] > 0 for r in result["constant_tokens"])
    assert (tmp_path / "gpu.md").exists()
