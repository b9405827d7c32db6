"""The Triton kernel under TRITON_INTERPRET=1 against the torch path (small N, few rows: slow)."""

from __future__ import annotations

import pytest
import rdfft
import torch

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, poisoned_empty, randn

pytestmark = pytest.mark.skipif(not triton_usable(), reason="triton not usable here")


@pytest.mark.parametrize("n", [2, 4, 16, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("inverse", [False, True])
def test_kernel_equals_torch_and_stays_in_its_row(n, dtype, inverse):
    from rdfft.fft import irdfft_rows_, rdfft_rows_
    from rdfft.kernels import irdfft_rows_triton_, rdfft_rows_triton_

    # rows of length n inside a NaN-poisoned (3, 2n) buffer: the kernel must write every element
    # of its rows (stride 2n) and nothing of the poisoned halves
    buf = poisoned_empty(3, 2 * n, dtype=dtype)
    rows = buf[:, :n]
    rows.copy_(randn(3, n, seed=n, dtype=dtype))
    expected = rows.clone()
    (irdfft_rows_ if inverse else rdfft_rows_)(expected)
    ptr = rows.data_ptr()
    out = (irdfft_rows_triton_ if inverse else rdfft_rows_triton_)(rows)
    assert out.data_ptr() == ptr
    assert torch.isnan(buf[:, n:]).all()
    assert not torch.isnan(rows).any()
    # same schedule and roundings (bf16: round-to-nearest-even per stage, like the torch path)
    assert_close(rows.double(), expected.double(), rtol=1e-5)
    if dtype == torch.bfloat16:
        assert torch.equal(rows, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_triton_backend_forward_backward_equals_torch(dtype):
    # 3 rows; the transform dim is first (made contiguous), so ops moves it last and the
    # backward's fresh buffers are (3, N) rows as well
    n = 16
    x = randn(n, 3, seed=1, dtype=dtype).movedim(0, -1).contiguous().movedim(-1, 0)
    g = randn(n, 3, seed=2, dtype=dtype)
    results = {}
    for backend in ("torch", "triton"):
        xi = x.clone().requires_grad_()
        h = rdfft.rdfft(xi, dim=0, backend=backend)
        y = rdfft.irdfft(h * 1.5, dim=0, backend=backend) + h
        (gx,) = torch.autograd.grad(y, xi, g)
        results[backend] = (h.detach(), y.detach(), gx)
    for a, b in zip(results["triton"], results["torch"]):
        assert_close(a, b, rtol=1e-5)
    assert_close(results["torch"][0], rdfft.rdfft(x, dim=0, backend="reference"), rtol=1e-5)


def test_triton_in_place_round_trip_keeps_storage():
    x = randn(2, 3, 16, seed=3)
    ref = x.clone()
    ptr = x.data_ptr()
    rdfft.rdfft_(x, backend="triton")
    assert_close(x, rdfft.rdfft(ref, backend="torch"), rtol=1e-5)
    rdfft.irdfft_(x, backend="triton")
    assert x.data_ptr() == ptr
    assert_close(x, ref, rtol=1e-5)


def test_auto_uses_torch_on_cpu(monkeypatch):
    import rdfft.kernels as kernels

    def boom(rows):
        raise AssertionError("auto dispatched a CPU tensor to Triton")

    monkeypatch.setattr(kernels, "rdfft_rows_triton_", boom)
    x = randn(4, 8, seed=4)
    assert_close(rdfft.rdfft(x), rdfft.rdfft(x, backend="torch"), rtol=0)


def _gpu_bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("rdfft_gpu_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_benchmark_toy_kernel_sections(tmp_path):
    res = _gpu_bench().main(
        ["--toy", "--sections", "correctness,race,timing", "--out", str(tmp_path / "gpu.json")]
    )
    assert res["correctness"] and all(r["rel_err"] <= r["tol"] for r in res["correctness"])
    assert res["race"]["bitwise_repeatable"]
    assert len(res["timing"]) == 2 and all(r["triton_us"] > 0 for r in res["timing"])
    assert (tmp_path / "gpu.json").exists()


@pytest.mark.slow  # builds a RoBERTa (transformers import): ~30 s on a loaded machine
def test_gpu_benchmark_toy_finetune_section():
    res = _gpu_bench().main(["--toy", "--sections", "finetune_memory"])
    assert {r["arm"] for r in res["finetune_memory"]} >= {"bca_rdfft", "bca_rfft"}
    assert all(r["trainable"] > 0 for r in res["finetune_memory"])
