"""Triton kernels (interpreter on CPU) against dequantize-then-matmul."""

import pytest
import torch
from neurips25_core.testing import assert_close

from qpalette.bench import random_quantized
from qpalette.ops import qmatmul

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
