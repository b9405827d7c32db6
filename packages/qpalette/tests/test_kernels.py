"""Triton kernels (interpreter on CPU) against dequantize-then-matmul."""

import pytest
import torch
from qpalette.bench import random_quantized
from qpalette.ops import qmatmul

from neurips25_core.testing import assert_close

triton = pytest.importorskip("triton", reason="triton is not installed (Linux only)")


@pytest.mark.parametrize("M", [1, 4])
@pytest.mark.parametrize("spec", ["nuq-3", "vq-1.5", "tcq-2", "tcq-3.25", "tcq-1.5-L8"])
def test_kernels_match_dequantize_then_matmul(M, spec):
    qm = random_quantized(spec, (64, 256), seed=M)
    x = torch.randn(M, 256, generator=torch.Generator().manual_seed(M))
    ref = x @ qm.dequantize().T
    out = qmatmul(x, qm, backend="triton")
    assert_close(out, ref, rtol=1e-4)


def test_kernel_on_real_codes():
    from qpalette.quantizers import quantize

    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    qm = quantize(w, "tcq-2-L8")
    x = torch.randn(2, 64)
    assert_close(qmatmul(x, qm, backend="triton"), x @ qm.dequantize().T, rtol=1e-4)


def test_qmatmul_checks_inputs():
    qm = random_quantized("nuq-2", (32, 64))
    with pytest.raises(ValueError, match="backend"):
        qmatmul(torch.randn(1, 64), qm, backend="cuda")
    with pytest.raises(ValueError, match="last dim"):
        qmatmul(torch.randn(1, 32), qm)


@pytest.mark.slow  # ~8 s under the interpreter
def test_gpu_benchmark_toy(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("qpalette_gpu_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(["--toy", "--out", str(tmp_path / "gpu.json")])
    assert res["correctness"] and all(r["rel_err"] <= 1e-4 for r in res["correctness"])
    assert res["fused"] and res["fused"][0]["rel_err"] <= 1e-5 and (tmp_path / "gpu.json").exists()
    assert len(res["fwht"]) == 2 and all(r["rel_err"] <= 1e-5 for r in res["fwht"])


@pytest.mark.parametrize("n", [2, 16, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fwht_kernel_matches_torch(n, dtype):
    from qpalette.kernels.fwht import fwht_rows
    from qpalette.rotation import _fwht

    from neurips25_core.testing import poisoned_empty

    g = torch.Generator().manual_seed(n)
    x = torch.randn(3, n, generator=g, dtype=torch.float64).to(dtype)
    out = poisoned_empty(3, n, dtype=dtype)
    y = fwht_rows(x, scale=0.5, out=out)
    assert y is out and not torch.isnan(out).any()
    assert_close(y, _fwht(x.double()) * 0.5, rtol=1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("d", [32, 48])
def test_hadamard_transform_triton_backend(d):
    from qpalette.rotation import hadamard_transform, inverse_hadamard_transform, random_signs

    x = torch.randn(3, d, generator=torch.Generator().manual_seed(d))
    s = random_signs(d, seed=1)
    y = hadamard_transform(x, s, backend="triton")
    assert_close(y, hadamard_transform(x.double(), s.double(), backend="torch"), rtol=1e-5)
    assert_close(inverse_hadamard_transform(y, s, backend="triton"), x, rtol=1e-5)
    with pytest.raises(ValueError, match="backend"):
        hadamard_transform(x, s, backend="cuda")


def test_device_side_codes_are_moved_once():
    from qpalette.modules import QPaletteLinear

    q = QPaletteLinear.from_linear(torch.nn.Linear(32, 16), "nuq-3", signs=None)
    a = q.device_qweight(torch.device("cpu"))
    assert q.device_qweight(torch.device("cpu")) is a
    assert all(torch.equal(c, d) for c, d in zip(a.codes, q.qweight.codes))
    assert torch.equal(a.dequantize(), q.qweight.dequantize())
