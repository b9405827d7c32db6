"""Every matmul path (torch and interpreted Triton) against the float64 reference."""

import codegemm
import pytest
import torch
from codegemm.psumbook import make_plan, psumbook_matmul, resolve_tile
from codegemm.reference import codebook_matmul_reference

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, check_forward_backward, poisoned_empty, randn

from .helpers import dyadic_format, dyadic_x, random_format

SWEEP = [
    # (M, K, m, v, bits, g)
    (37, 256, 2, 8, 8, 128),  # m2v8, two groups
    (21, 384, 1, 4, 8, 128),  # m1v4, K not a multiple of a 256 tile
    (19, 96, 2, 4, 4, 32),
    (9, 64, 1, 8, 4, 64),  # g = K
]


@pytest.mark.parametrize(("rows", "k", "m", "v", "bits", "g"), SWEEP)
@pytest.mark.parametrize("n", [1, 3, 16])
@pytest.mark.parametrize("backend", ["psumbook", "dequant"])
def test_torch_paths_random(rows, k, m, v, bits, g, n, backend):
    codes, books, scales = random_format(rows, k, m, v, bits, g, seed=n)
    x = randn(n, k, seed=7)
    ref = codebook_matmul_reference(x, codes, books, scales)
    y = codegemm.codebook_matmul(x, codes, books, scales, backend=backend, impl="torch")
    assert y.dtype == torch.float32
    assert_close(y, ref, rtol=2e-6, name=backend)


@pytest.mark.parametrize(("rows", "k", "m", "v", "bits", "g"), SWEEP)
@pytest.mark.parametrize("tile_k", [32, 64, 256])
def test_torch_psumbook_k_tiles(rows, k, m, v, bits, g, tile_k):
    """Several K-tiles, tiles smaller than a group, and K not a multiple of the tile."""
    codes, books, scales = random_format(rows, k, m, v, bits, g, seed=2)
    x = randn(5, k, seed=8)
    plan = make_plan(codes, 1 << bits, v, g, tile_k)
    assert plan.tile == resolve_tile(k, v, g, tile_k)
    y = psumbook_matmul(x, books, scales, plan)
    assert_close(y, codebook_matmul_reference(x, codes, books, scales), rtol=2e-6)


def test_torch_dequant_row_blocks():
    """The baseline rebuilds Ŵ in row blocks; M = 37 is not a multiple of the block."""
    from codegemm.psumbook import dequant_matmul, rebuild_index

    codes, books, scales = random_format(37, 128, 2, 8, 8, 64, seed=4)
    x = randn(3, 128, seed=5)
    ref = codebook_matmul_reference(x, codes, books, scales)
    for block in (1, 8, 36, 64):
        assert_close(
            dequant_matmul(x, codes, books, scales, rebuild_index(codes, 256), row_block=block),
            ref,
            rtol=2e-6,
        )


def test_resolve_tile():
    assert resolve_tile(4096, 8, 128, 300) == 256
    assert resolve_tile(4096, 8, 128, 48) == 32
    assert resolve_tile(4096, 8, 128, None) == 4096
    assert resolve_tile(384, 4, 384, 100) == 96


@pytest.mark.parametrize(("m", "v"), [(1, 4), (2, 8)])
@pytest.mark.parametrize("backend", ["psumbook", "dequant"])
@pytest.mark.parametrize("tile_k", [None, 128])
def test_torch_paths_exact_on_dyadic_values(m, v, backend, tile_k):
    codes, books, scales = dyadic_format(23, 384, m, v, 8, 128, seed=1)
    x = dyadic_x(3, 384)
    ref = codebook_matmul_reference(x, codes, books, scales)
    plan = make_plan(codes, 256, v, 128, tile_k) if backend == "psumbook" else None
    y = codegemm.codebook_matmul(x, codes, books, scales, backend=backend, impl="torch", plan=plan)
    assert torch.equal(y.double(), ref)


def test_leading_dims_and_float64_and_bf16():
    codes, books, scales = random_format(11, 128, 2, 8, 8, 64)
    x = randn(2, 3, 128, seed=1, dtype=torch.float64)
    ref = codebook_matmul_reference(x, codes, books, scales)
    for backend in ("psumbook", "dequant", "reference"):
        y = codegemm.codebook_matmul(x, codes, books, scales, backend=backend, impl="torch")
        assert y.shape == (2, 3, 11) and y.dtype == torch.float64
        assert_close(y, ref, rtol=1e-6 if backend != "reference" else 1e-12)  # fp32 codebooks
    yb = codegemm.codebook_matmul(
        x.bfloat16(), codes, books, scales, backend="psumbook", impl="torch"
    )
    assert yb.dtype == torch.bfloat16
    assert_close(yb, codebook_matmul_reference(x.bfloat16(), codes, books, scales))


def test_auto_backend_switches_on_tokens():
    codes, books, scales = random_format(11, 128, 1, 4, 8, 128)
    limit = codegemm.ops.AUTO_CROSSOVER["cpu"]
    for n in (1, limit, limit + 1):
        x = randn(n, 128, seed=n)
        y = codegemm.codebook_matmul(x, codes, books, scales)
        assert_close(y, codebook_matmul_reference(x, codes, books, scales), rtol=2e-6)


@pytest.mark.parametrize("backend", ["psumbook", "dequant"])
def test_backward_reaches_x(backend):
    codes, books, scales = random_format(13, 128, 2, 8, 8, 64, seed=5)
    x = randn(3, 128, seed=6, requires_grad=True)
    errs = check_forward_backward(
        lambda t: codegemm.codebook_matmul(t, codes, books, scales, backend=backend, impl="torch"),
        lambda t: codebook_matmul_reference(t, codes, books, scales),
        [x],
    )
    assert errs  # forward and grad of x compared
    xd = randn(2, 128, seed=6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: codegemm.codebook_matmul(t, codes, books, scales, backend=backend, impl="torch"),
        (xd,),
    )


# ----------------------------------------------------------------------------- errors


def test_bad_inputs_raise_naming_the_argument():
    codes, books, scales = random_format(8, 64, 2, 8, 4, 32)
    x = randn(2, 64)
    mm = codegemm.codebook_matmul
    with pytest.raises(TypeError, match="codes"):
        mm(x, codes.to(torch.int32), books, scales)
    with pytest.raises(ValueError, match="codes"):
        mm(x, torch.full_like(codes, 16), books, scales)  # >= C = 2^4
    with pytest.raises(ValueError, match="codes"):
        mm(x, codes, books[:1], scales)  # m mismatch
    with pytest.raises(ValueError, match="codebooks"):
        mm(x, codes, torch.randn(2, 12, 8), scales)  # C not a power of two
    with pytest.raises(ValueError, match="scales"):
        mm(x, codes, books, scales[:, :1].repeat(1, 3))  # K=64 not a multiple of 3 groups
    with pytest.raises(ValueError, match="scales"):
        mm(x, codes, books, torch.ones(8, 16))  # g = 4 not a multiple of v = 8
    with pytest.raises(ValueError, match="scales"):
        mm(x, codes, books, scales[:5])
    with pytest.raises(ValueError, match="x"):
        mm(randn(2, 60), codes, books, scales)  # K mismatch
    with pytest.raises(TypeError, match="x"):
        mm(x.to(torch.int64), codes, books, scales)
    with pytest.raises(ValueError, match="backend"):
        mm(x, codes, books, scales, backend="lut")
    with pytest.raises(ValueError, match="impl"):
        mm(x, codes, books, scales, impl="cuda")
    with pytest.raises(ValueError, match="device"):
        mm(x.to("meta"), codes, books, scales)
    with pytest.raises(ValueError, match="dequant_fused"):
        mm(x, codes, books, scales, backend="dequant_fused", impl="torch")
    with pytest.raises(ValueError, match="psumbook_splitk"):
        mm(x, codes, books, scales, backend="psumbook_splitk")  # CPU tensors, impl="auto"
    with pytest.raises(ValueError, match="vector_size"):
        codegemm.CodebookConfig(vector_size=8, group_size=12)
    with pytest.raises(ValueError, match="codebook_bits"):
        codegemm.CodebookConfig(codebook_bits=9)
    # nothing was mutated by the failed calls
    assert codes.max() < 16


# ----------------------------------------------------------------------------- Triton (interpreter)

needs_triton = pytest.mark.skipif(
    not triton_usable(), reason="Triton is not usable here (no GPU, no interpreter)"
)

TRITON_SHAPES = [
    # (M, K, m, v, bits, g): ~1e4 elements per tensor at most
    (21, 64, 1, 4, 8, 32),
    (35, 128, 2, 8, 8, 64),
    (9, 96, 2, 4, 4, 32),
    (70, 64, 1, 8, 4, 64),  # M beyond one 64-row block
]


@needs_triton
@pytest.mark.parametrize(("rows", "k", "m", "v", "bits", "g"), TRITON_SHAPES)
@pytest.mark.parametrize("n", [1, 3, 17])
def test_triton_psumbook_random(rows, k, m, v, bits, g, n):
    from codegemm.kernels.codebook import psumbook_matmul_triton

    codes, books, scales = random_format(rows, k, m, v, bits, g, seed=n)
    x = randn(n, k, seed=3)
    out = poisoned_empty(n, rows)
    table = poisoned_empty(n, k // v, m, 1 << bits)
    y = psumbook_matmul_triton(x, codes, books, scales, out=out, table=table)
    assert_close(y, codebook_matmul_reference(x, codes, books, scales))
    assert_close(table, codegemm.reference.psumbook_reference(x, books), name="psumbook table")


@needs_triton
@pytest.mark.parametrize(("rows", "k", "m", "v", "bits", "g"), TRITON_SHAPES)
@pytest.mark.parametrize("n", [1, 17])
def test_triton_dequant_paths_random(rows, k, m, v, bits, g, n):
    from codegemm.kernels.codebook import dequant_gemm_triton, dequantize_triton

    codes, books, scales = random_format(rows, k, m, v, bits, g, seed=n)
    w = dequantize_triton(codes, books, scales, out=poisoned_empty(rows, k))
    assert_close(w, codegemm.reference.dequantize_reference(codes, books, scales))
    x = randn(n, k, seed=4)
    y = dequant_gemm_triton(x, codes, books, scales, out=poisoned_empty(n, rows))
    assert_close(y, codebook_matmul_reference(x, codes, books, scales))


@needs_triton
@pytest.mark.parametrize(("rows", "k", "m", "v", "bits", "g"), TRITON_SHAPES)
@pytest.mark.parametrize("n", [1, 3])
def test_triton_psumbook_splitk_random(rows, k, m, v, bits, g, n):
    """The fused split-K kernel (table in registers, tl.gather, atomics), several K-slices."""
    from codegemm.kernels.codebook import psumbook_splitk_triton

    codes, books, scales = random_format(rows, k, m, v, bits, g, seed=n)
    x = randn(n, k, seed=9)
    ref = codebook_matmul_reference(x, codes, books, scales)
    assert_close(psumbook_splitk_triton(x, codes, books, scales, block_m=32), ref)
    assert_close(psumbook_splitk_triton(x, codes, books, scales, tile_k=v, block_m=64), ref)
    with pytest.raises(ValueError, match="tile_k"):
        psumbook_splitk_triton(x, codes, books, scales, tile_k=3 * v)


@needs_triton
@pytest.mark.parametrize("backend", ["psumbook", "psumbook_splitk", "dequant", "dequant_fused"])
@pytest.mark.parametrize(("m", "v"), [(1, 4), (2, 8)])
def test_triton_exact_on_dyadic_values(backend, m, v):
    codes, books, scales = dyadic_format(19, 128, m, v, 8, 64, seed=2)
    x = dyadic_x(3, 128, seed=1)
    y = codegemm.codebook_matmul(x, codes, books, scales, backend=backend, impl="triton")
    assert torch.equal(y.double(), codebook_matmul_reference(x, codes, books, scales))


@needs_triton
def test_triton_backward_and_leading_dims():
    codes, books, scales = random_format(13, 64, 1, 4, 8, 32, seed=5)
    x = randn(2, 3, 64, seed=6, requires_grad=True)
    errs = check_forward_backward(
        lambda t: codegemm.codebook_matmul(
            t, codes, books, scales, backend="psumbook", impl="triton"
        ),
        lambda t: codebook_matmul_reference(t, codes, books, scales),
        [x],
    )
    assert errs
