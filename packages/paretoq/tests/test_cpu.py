"""The numba CPU packed matmul (the ``cpu`` extra) against the float64 reference; skipped without numba."""

from __future__ import annotations

import numpy as np
import paretoq
import pytest
import torch
from paretoq.cpu import ROW_TILE, cpu_layout, numba_available, packed_matmul_cpu
from paretoq.ops import packed_matmul

from neurips25_core.testing import assert_close, randn

pytestmark = pytest.mark.skipif(
    not numba_available(), reason="numba absent: pip install 'paretoq[cpu]'"
)

BITS = (1, 1.58, 2, 3, 4)


def _packed(n, k, bits, seed=0, bias=True):
    lin = torch.nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(randn(n, k, seed=seed, scale=0.05))
        if bias:
            lin.bias.copy_(randn(n, seed=seed + 1))
    q = paretoq.QuantLinear.from_linear(lin, bits)
    with torch.no_grad():
        q.alpha.mul_(0.5 + randn(n, 1, seed=seed + 2).abs().clamp(max=1.0))
    return paretoq.PackedLinear.from_quant_linear(q)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize(("out", "k"), [(300, 203), (37, 77), (5, 1)])
@pytest.mark.parametrize("n", [1, 3, 5, 19])
def test_numba_kernel_vs_reference(bits, out, k, n):
    """Odd M (not a multiple of the 256-row tile), K not a multiple of 32; NaN scratch first."""
    p = _packed(out, k, bits, seed=n)
    x = randn(n, k, seed=3)
    ref = packed_matmul(x.double(), p.planes, p.scale.double(), bits, k, backend="reference")
    padded = -(-out // ROW_TILE) * ROW_TILE
    if n == 1:
        shape = (padded,)
    elif n <= 4:  # the small-N loop
        shape = (n, padded)
    else:  # the token-blocked kernel
        width = 8 if n <= 8 else 16
        shape = (-(-n // width), padded, width)
    scratch = np.full(shape, np.nan, np.float32)
    y = packed_matmul_cpu(x, cpu_layout(p.planes, p.scale, bits), scratch=scratch)
    assert_close(y, ref, rtol=1e-5, name=f"numba {bits}-bit")


@pytest.mark.parametrize("bits", BITS)
def test_auto_backend_and_module(bits):
    p = _packed(37, 77, bits)
    x = randn(2, 5, 77, seed=1)
    ref = packed_matmul(
        x.double(), p.planes, p.scale.double(), bits, 77, p.bias.double(), backend="reference"
    )
    with torch.no_grad():
        y = p(x)  # auto on CPU -> numba, layout cached on the module
        assert p._layout is not None
        assert_close(y, ref, rtol=1e-5)
        layout = p._layout
        p(x)
        assert p._layout is layout
        p.scale.mul_(2)
        assert_close(p(x), packed_matmul(x.double(), p.planes, p.scale.double(), bits, 77,
                                         p.bias.double(), backend="reference"), rtol=1e-5)  # fmt: skip
        assert p._layout is not layout
    assert set(p.state_dict()) == {"qweight", "scale", "bias", "_extra_state"} | (
        {"qweight_hi"} if bits == 3 else set()
    )


def test_numba_errors_and_grad_fallback():
    p = _packed(9, 40, 2)
    x = randn(3, 40, seed=0).requires_grad_()
    with pytest.raises(ValueError, match="inference-only"):
        packed_matmul(x, p.planes, p.scale, 2, 40, backend="numba")
    y = p(x)  # auto with a gradient falls back to the differentiable torch path
    y.sum().backward()
    assert x.grad is not None
    with pytest.raises(TypeError, match="x:"):
        packed_matmul(x.detach().double(), p.planes, p.scale, 2, 40, backend="numba")
    with pytest.raises(ValueError, match="scratch"):
        packed_matmul_cpu(
            x.detach(), cpu_layout(p.planes, p.scale, 2), scratch=np.empty(3, np.float32)
        )


@pytest.mark.parametrize("n", [1, 3, 19])
def test_numba_parallel_build_vs_reference(n):
    """Two threads run the ``prange`` build (the default suite runs one thread: the serial build)."""
    from neurips25_core.bench import num_threads

    p = _packed(300, 203, 3, seed=n)
    x = randn(n, 203, seed=3)
    ref = packed_matmul(x.double(), p.planes, p.scale.double(), 3, 203, backend="reference")
    with num_threads(2):
        y = packed_matmul_cpu(x, cpu_layout(p.planes, p.scale, 3))
    assert_close(y, ref, rtol=1e-5, name="numba 3-bit, 2 threads")
