"""The benchmark suite is declared and its helpers work; the GPU script runs at toy size."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from tfla.bench import PEER_MISSING, SUITE, _check_equal, _runner, peak_memory, peer_kernels

from neurips25_core.device import triton_usable


def test_suite_declares_speed_and_quality_cases():
    kinds = {c.name: c.kind for c in SUITE.cases}
    assert kinds == {
        "speed_vs_length": "speed",
        "chunk_size_sweep": "speed",
        "lm_quality": "quality",
    }
    assert SUITE.name == "tfla"


def test_every_case_has_every_mode():
    for case in SUITE.cases:
        assert set(case.modes) == {"smoke", "quick", "full"}, case.name


def test_runners_run_forward_and_backward():
    for method in ("chunkwise", "chunkwise_detached", "parallel", "recurrent"):
        h = _runner(method, 32, backward=False)()
        assert h.shape == (1, 4, 32, 64) and torch.isfinite(h).all()
        grads = _runner(method, 32, backward=True)()
        assert len(grads) == 5 and all(torch.isfinite(g).all() for g in grads)


def test_peer_outputs_and_gradients_equal_ours():
    if peer_kernels() is None:
        pytest.skip(PEER_MISSING)
    _check_equal("chunkwise", "mlstm_kernels native_autograd", 64)
    _check_equal("chunkwise_detached", "mlstm_kernels native_custbw", 64)
    with pytest.raises(AssertionError):  # the two gradient semantics do differ
        _check_equal("chunkwise", "mlstm_kernels native_custbw", 64)


@pytest.mark.slow
def test_peak_memory_sees_quadratic_memory():
    chunk, parallel = peak_memory("chunkwise", 1024), peak_memory("parallel", 1024)
    # The parallel form holds several (H, S, S) float32 matrices (16 MiB each here).
    assert parallel > 16 * 2**20 and chunk < parallel


@pytest.mark.slow
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
