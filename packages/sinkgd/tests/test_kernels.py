"""The fast paths (batched torch, fused Triton under the interpreter) against the float64 reference."""

import pytest
import sinkgd
import torch
from sinkgd import reference

from neurips25_core.testing import assert_close, poisoned_empty, randn

SHAPES = [(1, 1, 9), (1, 7, 1), (2, 13, 37), (3, 37, 21), (1, 70, 130)]


def ref_batched(g, num_iters=5):
    flat = g.reshape(-1, *g.shape[-2:]).double()
    return torch.stack([reference.sr_sinkhorn(x, num_iters) for x in flat]).reshape(g.shape)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("num_iters", [1, 5])
def test_torch_path_matches_reference(shape, num_iters):
    g = randn(*shape, seed=7)
    assert_close(
        sinkgd.sr_sinkhorn(g, num_iters, backend="torch"), ref_batched(g, num_iters), rtol=1e-6
    )
    g64 = g.double()
    assert_close(
        sinkgd.sr_sinkhorn(g64, num_iters, backend="torch"), ref_batched(g64, num_iters), rtol=1e-10
    )


def test_torch_path_batches_over_several_leading_dims_and_noncontiguous_input():
    g = randn(2, 3, 9, 14, seed=8)
    out = sinkgd.sr_sinkhorn(g, backend="torch")
    assert out.shape == g.shape
    assert_close(out, ref_batched(g), rtol=1e-6)
    gt = randn(2, 14, 9, seed=9).mT  # non-contiguous (2, 9, 14)
    assert_close(sinkgd.sr_sinkhorn(gt, backend="torch"), ref_batched(gt), rtol=1e-6)


def test_bf16_input_accumulates_in_fp32():
    g = randn(2, 24, 40, seed=10).bfloat16()
    out = sinkgd.sr_sinkhorn(g, backend="torch")
    assert out.dtype == torch.bfloat16
    # the reference on the same (bf16-rounded) values; only the output rounding differs
    assert_close(out, ref_batched(g.float()), rtol=1.6e-2)
    assert_close(sinkgd.sr_sinkhorn(g.float(), backend="torch"), ref_batched(g.float()), rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_triton_kernel_matches_torch_under_the_interpreter(shape):
    g = randn(*shape, seed=12)
    out = sinkgd.sr_sinkhorn(g, 5, backend="triton")
    assert_close(out, sinkgd.sr_sinkhorn(g, 5, backend="torch"), rtol=1e-5)
    assert_close(out, ref_batched(g), rtol=1e-5)


def test_triton_kernel_writes_every_output_and_handles_zero_rows_and_columns():
    from sinkgd.kernels.sinkhorn import sr_sinkhorn_triton

    g = randn(2, 19, 45, seed=13)
    g[0, 4] = 0
    g[1, :, 44] = 0
    out = poisoned_empty(2, 19, 45)
    sr_sinkhorn_triton(g, 5, 1e-8, out=out)
    assert torch.isfinite(out).all()
    assert_close(out, ref_batched(g), rtol=1e-5)
    assert (out[0, 4] == 0).all() and (out[1, :, 44] == 0).all()
    z = sinkgd.sr_sinkhorn(torch.zeros(1, 5, 8), backend="triton")
    assert torch.equal(z, torch.zeros(1, 5, 8))


def test_triton_kernel_on_bf16_input_and_fp32_output():
    from sinkgd.kernels.sinkhorn import sr_sinkhorn_triton

    g = randn(1, 24, 40, seed=14).bfloat16()
    out = sr_sinkhorn_triton(g, 5, 1e-8, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    assert_close(out, ref_batched(g.float()), rtol=1e-5)


def test_empty_inputs():
    for backend in ("torch", "triton", "reference"):
        assert sinkgd.sr_sinkhorn(torch.zeros(0, 4, 5), backend=backend).shape == (0, 4, 5)
        assert sinkgd.sr_sinkhorn(torch.zeros(3, 0), backend=backend).shape == (3, 0)


def test_auto_backend_is_torch_on_cpu():
    g = randn(6, 10, seed=15)
    assert torch.equal(sinkgd.sr_sinkhorn(g), sinkgd.sr_sinkhorn(g, backend="torch"))


def test_bad_arguments_raise_and_name_the_argument():
    g = randn(4, 5, seed=0)
    with pytest.raises(TypeError, match="grad"):
        sinkgd.sr_sinkhorn(g.numpy())
    with pytest.raises(TypeError, match="grad"):
        sinkgd.sr_sinkhorn(torch.ones(4, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="grad"):
        sinkgd.sr_sinkhorn(torch.ones(5))
    with pytest.raises(ValueError, match="num_iters"):
        sinkgd.sr_sinkhorn(g, num_iters=0)
    with pytest.raises(TypeError, match="num_iters"):
        sinkgd.sr_sinkhorn(g, num_iters=2.5)
    with pytest.raises(ValueError, match="eps"):
        sinkgd.sr_sinkhorn(g, eps=0.0)
    with pytest.raises(ValueError, match="eps"):
        sinkgd.sr_sinkhorn(g, eps=-1e-8)
    with pytest.raises(ValueError, match="backend"):
        sinkgd.sr_sinkhorn(g, backend="cuda")
    with pytest.raises(TypeError, match="grad"):
        sinkgd.sr_sinkhorn(g.double(), backend="triton")
    with pytest.raises(TypeError, match="grad"):
        sinkgd.sr_sinkhorn(g.to_sparse())


def test_normalisation_captures_as_one_graph():
    """The torch path traces into one graph (``fullgraph=True``): no graph breaks for ``torch.compile``."""
    from sinkgd.sinkhorn import sr_sinkhorn_torch

    torch._dynamo.reset()
    g = randn(3, 17, 29, seed=16)
    compiled = torch.compile(sr_sinkhorn_torch, fullgraph=True, dynamic=False, backend="aot_eager")
    assert_close(compiled(g, 5, 1e-8), sr_sinkhorn_torch(g, 5, 1e-8), rtol=1e-6)


@pytest.mark.slow
def test_compiled_normalisation_equals_eager_with_inductor():
    """Inductor-compiled (CPU C++ codegen, ~75 s on 2 busy cores) equals eager."""
    from sinkgd.sinkhorn import sr_sinkhorn_torch

    torch._dynamo.reset()
    g = randn(3, 17, 29, seed=16)
    compiled = torch.compile(sr_sinkhorn_torch, fullgraph=True, dynamic=False)
    assert_close(compiled(g, 5, 1e-8), sr_sinkhorn_torch(g, 5, 1e-8), rtol=1e-6)
