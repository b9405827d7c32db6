"""The benchmark suite is declared, and the GPU script runs at toy size under the interpreter."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from paretoq.bench import SUITE

from neurips25_core.device import triton_usable


def test_suite_declares_quality_and_speed_cases():
    assert SUITE.name == "paretoq"
    kinds = {c.name: c.kind for c in SUITE.cases}
    assert kinds["qat_reproduction"] == "quality"
    assert kinds["packed_matmul_cpu"] == "speed"
    assert kinds["ablation_2bit_grid"] == "quality"
    # every case runs in every mode (smoke sizes included)
    assert all(set(c.modes) == {"smoke", "quick", "full"} for c in SUITE.cases)


def test_packed_matmul_case_smoke_compares_medians(tmp_path):
    case = next(c for c in SUITE.cases if c.name == "packed_matmul_cpu")
    results = case.run("paretoq", "smoke", tmp_path, log=lambda s: None)
    impls = {r.params.get("impl") for r in results if r.metric == "time"}
    assert impls == {
        "fp32 nn.Linear",
        "packed (torch)",
        "dequantize+matmul (reference)",
        "dequantize+matmul (fast)",
    }
    vs = [r for r in results if r.metric == "time_vs_dequant"]
    assert vs and all(r.baseline.startswith("dequantize+matmul (") for r in vs)
    assert all(r.params["rounds"] >= 5 for r in results if r.metric == "time")


def test_model_size_case_runs(tmp_path):
    case = next(c for c in SUITE.cases if c.name == "model_size")
    results = case.run("paretoq", "quick", tmp_path, log=lambda s: None)
    by_bits = {r.params["bits"]: r for r in results if r.metric == "packed_model_size"}
    assert set(by_bits) == {4, 3, 2, 1.58, 1}
    # Smaller bit widths give smaller packed models, all below the 16-bit model.
    sizes = [by_bits[b].value for b in (4, 3, 2, 1)]
    assert sizes == sorted(sizes, reverse=True)
    assert all(r.ratio > 1 for r in by_bits.values())


@pytest.mark.skipif(not triton_usable(), reason="needs triton with a GPU or TRITON_INTERPRET=1")
def test_gpu_script_toy(tmp_path):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("paretoq_gpu_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gpu.json"
    assert module.main(["--toy", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["correctness"] and all(r["ok"] for r in data["correctness"])
    assert {r["bits"] for r in data["timings"]} == {1, 1.58, 2, 3, 4}
    assert all(r["us_packed"] > 0 for r in data["timings"])
