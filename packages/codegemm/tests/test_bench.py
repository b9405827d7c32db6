"""The benchmark suite's helpers and the GPU script (``--toy`` under the interpreter)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
from codegemm.bench import SUITE, measured_crossover, predicted_crossover

from neurips25_core.device import triton_usable


def test_suite_declares_speed_and_quality_cases():
    assert SUITE.name == "codegemm"
    kinds = {case.name: case.kind for case in SUITE.cases}
    assert kinds == {
        "matmul_speed": "speed",
        "cpu_kernels": "speed",
        "gaussian_layer": "quality",
        "tiny_llama": "quality",
    }


def test_measured_crossover():
    tokens = [1, 2, 4, 8, 16]
    # psumbook grows with N, dequant is flat: they cross between 4 and 8
    assert measured_crossover(tokens, [1, 2, 3, 5, 9], [4, 4, 4, 4, 4]) == (6.0, "=")
    assert measured_crossover(tokens, [1, 1, 1, 1, 1], [2, 2, 2, 2, 2]) == (16.0, ">")
    assert measured_crossover(tokens, [3, 3, 3, 3, 3], [2, 2, 2, 2, 2]) == (1.0, "<=")
    # a noisy early loss does not count when psumbook wins again later
    n, bound = measured_crossover(tokens, [1, 5, 1, 5, 9], [4, 4, 4, 4, 4])
    assert bound == "=" and 4 < n < 8


def test_predicted_crossover_formula():
    rates = {"r_l": math.inf, "r_g": 1e9, "r_a": 1e9, "r_mac": 1e10, "bandwidth": 8e9}
    # spec §6: N* = (m/r_a + 8/BW) / ((m/v)/r_g − 1/r_mac), here 1/r_l = 0
    expected = (2 / 1e9 + 8 / 8e9) / (0.25 / 1e9 - 1 / 1e10)
    assert predicted_crossover(rates, 2, 8) == pytest.approx(expected)
    assert predicted_crossover({**rates, "r_mac": 1e9}, 2, 8) == math.inf  # psumbook always wins
    assert predicted_crossover({**rates, "r_l": 1e7}, 2, 8) == 0.0  # lookups alone cost more


@pytest.mark.skipif(not triton_usable(), reason="Triton is not usable here")
def test_gpu_script_runs_toy(tmp_path):
    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("codegemm_gpu_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gpu.json"
    assert module.main(["--toy", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["toy"] is True
    assert payload["correctness"] and all(c["ok"] for c in payload["correctness"])
    backends = {c["backend"] for c in payload["correctness"]}
    assert backends == {"psumbook", "psumbook_splitk", "dequant", "dequant_fused"}
    assert len(payload["timings_ms"]) == 8
