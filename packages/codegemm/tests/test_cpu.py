"""The numba CPU Psumbook kernel (the ``cpu`` extra) against the float64 reference; skipped without numba."""

import codegemm
import pytest
import torch
from codegemm.cpu import cpu_layout, numba_available, psumbook_cpu
from codegemm.reference import codebook_matmul_reference

from neurips25_core.testing import assert_close, poisoned_empty, randn

from .helpers import random_format

pytestmark = pytest.mark.skipif(
    not numba_available(), reason="numba absent: pip install 'codegemm[cpu]'"
)

# Odd M (not a multiple of the 256-row tile), K not a multiple of 32, every m in {1, 2},
# v in {4, 8}, C in {16, 256}, g < K and g = K.
SWEEP = [
    # (M, K, m, v, bits, g)
    (300, 200, 2, 8, 8, 40),
    (37, 200, 1, 8, 8, 200),
    (261, 132, 1, 4, 8, 44),
    (19, 108, 2, 4, 8, 108),
    (13, 72, 2, 8, 4, 24),
    (21, 60, 1, 4, 4, 12),
]


@pytest.mark.parametrize(("rows", "k", "m", "v", "bits", "g"), SWEEP)
# N = 1 (GEMV), 3 (small-N loop), 5 and 19 (token-blocked kernel, one and two chunks)
@pytest.mark.parametrize("n", [1, 3, 5, 19])
def test_numba_kernel_vs_reference(rows, k, m, v, bits, g, n):
    codes, books, scales = random_format(rows, k, m, v, bits, g, seed=n)
    x = randn(n, k, seed=5)
    ref = codebook_matmul_reference(x.double(), codes, books.double(), scales.double())
    out = poisoned_empty(n, rows, dtype=torch.float32)
    y = psumbook_cpu(x, cpu_layout(codes, books, scales), 1 << bits, out=out)
    assert y.data_ptr() == out.data_ptr()
    assert_close(y, ref, rtol=1e-5, name="numba psumbook")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_auto_picks_numba_and_module_caches_layout(dtype):
    lin = torch.nn.Linear(200, 37)
    config = codegemm.CodebookConfig(2, 8, 8, 40, kmeans_iters=1, refine_rounds=0)
    q = codegemm.quantize_linear(lin, config)
    x = randn(2, 200, seed=1).to(dtype)
    with torch.no_grad():
        y = q(x)
        first = q._layout
        assert first is not None  # auto on CPU -> numba, layout cached
        y2 = q(x)
        assert q._layout is first
        ref = codebook_matmul_reference(
            x.double(), q.codes, q.codebooks.double(), q.scales.double()
        )
        assert y.dtype == dtype
        assert_close(
            y.float(),
            (ref + q.bias.double()).float(),
            rtol=1e-2 if dtype == torch.bfloat16 else 1e-5,
        )
        assert torch.equal(y, y2)
        q.scales.mul_(2)  # a changed buffer rebuilds the layout
        q(x)
        assert q._layout is not first


def test_numba_impl_backward_and_errors():
    codes, books, scales = random_format(13, 72, 2, 8, 4, 24, seed=0)
    x = randn(3, 72, seed=2).requires_grad_()
    y = codegemm.codebook_matmul(x, codes, books, scales, backend="psumbook", impl="numba")
    y.sum().backward()
    w = codegemm.dequantize_weight(codes, books, scales)
    assert_close(x.grad, torch.ones(3, 13) @ w)
    with pytest.raises(ValueError, match="impl"):
        codegemm.codebook_matmul(x, codes, books, scales, backend="dequant", impl="numba")
    with pytest.raises(TypeError, match="x:"):
        codegemm.codebook_matmul(x.double(), codes, books, scales, backend="psumbook", impl="numba")
    with pytest.raises(ValueError, match="out"):
        psumbook_cpu(x.detach(), cpu_layout(codes, books, scales), 16, out=torch.empty(3, 12))


def test_state_dict_keeps_the_stored_format():
    lin = torch.nn.Linear(64, 9)
    q = codegemm.quantize_linear(
        lin, codegemm.CodebookConfig.m2v8(kmeans_iters=1, refine_rounds=0, group_size=64)
    )
    with torch.no_grad():
        q(randn(1, 64, seed=0))
    sd = q.state_dict()
    assert set(sd) == {"codes", "codebooks", "scales", "bias"}
    assert sd["codes"].shape == (9, 8, 2)


@pytest.mark.parametrize("n", [1, 3, 19])
def test_numba_parallel_build_vs_reference(n):
    """Two threads run the ``prange`` build (the default suite runs one thread: the serial build)."""
    from neurips25_core.bench import num_threads

    codes, books, scales = random_format(300, 200, 2, 8, 8, 40, seed=n)
    x = randn(n, 200, seed=5)
    ref = codebook_matmul_reference(x.double(), codes, books.double(), scales.double())
    with num_threads(2):
        y = psumbook_cpu(x, cpu_layout(codes, books, scales), 256, out=poisoned_empty(n, 300))
    assert_close(y, ref, rtol=1e-5, name="numba psumbook, 2 threads")


def test_auto_runs_numba_only_up_to_numba_max_tokens(monkeypatch):
    import codegemm.ops

    calls = []
    real = codegemm.ops.psumbook_cpu
    monkeypatch.setattr(
        codegemm.ops, "psumbook_cpu", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    codes, books, scales = random_format(13, 72, 2, 8, 4, 24, seed=0)
    limit = codegemm.ops.NUMBA_MAX_TOKENS
    for n in (limit, limit + 1):
        x = randn(n, 72, seed=n)
        y = codegemm.codebook_matmul(x, codes, books, scales, backend="psumbook")
        ref = codebook_matmul_reference(x.double(), codes, books.double(), scales.double())
        assert_close(y, ref, rtol=1e-5)
    assert len(calls) == 1  # the numba kernel ran for N = limit only; the torch psumbook beyond
