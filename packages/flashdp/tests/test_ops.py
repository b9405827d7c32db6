"""The op against the float64 reference on the issue's shapes, outputs poisoned first."""

from __future__ import annotations

import pytest
import torch
from flashdp import baselines, ops, reference

from neurips25_core.testing import assert_close, poisoned_empty, randn

SHAPES = [(1, 1, 1, 1), (3, 7, 5, 9), (5, 63, 17, 33), (2, 1, 64, 48)]


def _inputs(b, t, m, n, dtype, seed=0, scale=1.0):
    x = randn(b, t, n, seed=seed, dtype=dtype)
    g = randn(b, t, m, seed=seed + 1, dtype=dtype, scale=scale)
    return x, g


def _threshold(x, g):
    # A threshold between the smallest and the largest per-sample norm: some samples are clipped,
    # some are not (a single sample is clipped).
    norms = reference.per_sample_norms(x, g)
    return float(norms.median()) * 0.9


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("backend", "dtype", "rtol"),
    [
        ("torch", torch.float64, 1e-10),
        ("torch", torch.float32, 1e-6),
        ("explicit", torch.float64, 1e-10),
        ("explicit", torch.float32, 1e-6),
        ("ghost", torch.float64, 1e-10),
        ("ghost", torch.float32, 1e-6),
        ("reference", torch.float64, 1e-12),
    ],
)
def test_clipped_weight_grad_matches_reference(shape, backend, dtype, rtol):
    x, g = _inputs(*shape, dtype)
    c = _threshold(x, g)
    ref = reference.clipped_linear_weight_grad(x, g, c)
    out = poisoned_empty(shape[2], shape[3], dtype=dtype)
    out.copy_(ops.clipped_linear_weight_grad(x, g, c, backend=backend))
    assert out.dtype == dtype
    assert_close(out, ref.to(dtype), rtol=rtol)
    norms = ops.per_sample_norms(x, g, backend=backend)
    assert_close(norms, reference.per_sample_norms(x, g).to(norms.dtype), rtol=rtol)


@pytest.mark.parametrize("shape", SHAPES)
def test_opacus_op_matches_reference(shape):
    x, g = _inputs(*shape, torch.float64)
    c = _threshold(x, g)
    out = baselines.opacus_clipped_weight_grad(x, g, c)
    assert_close(out, reference.clipped_linear_weight_grad(x, g, c), rtol=1e-10)


@pytest.mark.parametrize("chunk_bytes", [1, 4 * 5 * 9 * 2, 10**9])
def test_chunk_size_does_not_change_the_result(chunk_bytes):
    x, g = _inputs(3, 7, 5, 9, torch.float64)
    c = _threshold(x, g)
    ref = reference.clipped_linear_weight_grad(x, g, c)
    out = ops.clipped_linear_weight_grad(x, g, c, backend="torch", chunk_bytes=chunk_bytes)
    assert_close(out, ref, rtol=1e-10)


def test_2d_and_4d_inputs_flatten_like_3d():
    x, g = _inputs(4, 6, 5, 7, torch.float64)
    c = _threshold(x, g)
    ref = reference.clipped_linear_weight_grad(x, g, c)
    x4, g4 = x.reshape(4, 2, 3, 7), g.reshape(4, 2, 3, 5)
    assert_close(ops.clipped_linear_weight_grad(x4, g4, c), ref, rtol=1e-10)
    x2, g2 = x[:, 0], g[:, 0]
    ref2 = reference.clipped_linear_weight_grad(x2.unsqueeze(1), g2.unsqueeze(1), c)
    assert_close(ops.clipped_linear_weight_grad(x2, g2, c), ref2, rtol=1e-10)
    # a 2-D per-sample gradient is the outer product g xᵀ
    outer = torch.einsum("bm,bn->bmn", g2, x2)
    assert_close(reference.per_sample_linear_grads(x2, g2)[0], outer, rtol=1e-12)


@pytest.mark.parametrize("lead", [(4,), (4, 6), (4, 2, 3)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize(
    ("backend", "dtype", "rtol"),
    [
        ("torch", torch.float64, 1e-10),
        ("torch", torch.float32, 1e-6),
        ("explicit", torch.float64, 1e-10),
        ("explicit", torch.float32, 1e-6),
        ("ghost", torch.float64, 1e-10),
        ("ghost", torch.float32, 1e-6),
    ],
)
def test_every_backend_on_2d_and_4d_inputs(lead, backend, dtype, rtol):
    x = randn(*lead, 7, seed=4, dtype=dtype)
    g = randn(*lead, 5, seed=5, dtype=dtype)
    c = _threshold(x, g)
    ref = reference.clipped_linear_weight_grad(x, g, c)  # flattens 2-D to T = 1, 4-D into T
    out = poisoned_empty(5, 7, dtype=dtype)
    out.copy_(ops.clipped_linear_weight_grad(x, g, c, backend=backend))
    assert_close(out, ref.to(dtype), rtol=rtol)
    assert_close(
        ops.per_sample_norms(x, g, backend=backend),
        reference.per_sample_norms(x, g).to(dtype),
        rtol=rtol,
    )


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("lead", [(3,), (3, 7), (3, 2, 4)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize(
    ("backend", "dtype", "rtol"),
    [
        ("torch", torch.float64, 1e-10),
        ("torch", torch.float32, 1e-6),
        ("explicit", torch.float32, 1e-6),
        ("ghost", torch.float32, 1e-6),
    ],
)
def test_dp_linear_with_and_without_bias(bias, lead, backend, dtype, rtol):
    import flashdp

    layer = torch.nn.Linear(9, 5, bias=bias).to(dtype)
    cfg = flashdp.FlashDPConfig(0.5, 0.0, loss_reduction="sum", backend=backend)
    model = flashdp.make_private(torch.nn.Sequential(layer), cfg)
    x = randn(*lead, 9, seed=6, dtype=dtype)
    w = randn(*lead, 5, seed=7, dtype=dtype)  # the loss Σ y ⊙ w has grad_out = w
    (model(x) * w).sum().backward()
    assert_close(layer.weight.grad, reference.clipped_linear_weight_grad(x, w, 0.5).to(dtype), rtol)
    if bias:
        ref_b = reference.clipped_linear_bias_grad(w, 0.5)  # 2-D: T = 1
        assert_close(layer.bias.grad, ref_b.to(dtype), rtol=rtol)
    else:
        assert layer.bias is None and len(flashdp.dp_groups(model)) == 1


def test_bias_gradient_uses_the_norm_of_the_summed_bias_gradient():
    x, g = _inputs(3, 7, 5, 9, torch.float64)
    _, gb = reference.per_sample_linear_grads(x, g, bias=True)
    assert_close(gb, g.sum(1), rtol=1e-12)
    c = float(gb.norm(dim=1).median())
    out, norms = ops.clipped_per_sample_sum(g.sum(1), c)
    assert_close(out, reference.clipped_linear_bias_grad(g, c), rtol=1e-12)
    assert_close(norms, gb.norm(dim=1), rtol=1e-12)


def test_invariants_clip_bound_and_huge_threshold():
    x, g = _inputs(5, 63, 17, 33, torch.float64)
    gw, _ = reference.per_sample_linear_grads(x, g)
    c = 0.3 * float(gw.flatten(1).norm(dim=1).min())
    factors = reference.clip_factors(gw.flatten(1).norm(dim=1), c)
    clipped_norms = (factors[:, None] * gw.flatten(1)).norm(dim=1)
    assert bool((clipped_norms <= c * (1 + 1e-6)).all())
    # C = 1e12: no sample is clipped, the non-DP gradient comes back
    out = ops.clipped_linear_weight_grad(x, g, 1e12, backend="torch")
    assert_close(out, baselines.nondp_weight_grad(x, g), rtol=1e-10)
    # a zero gradient has clip factor κ = 1 and contributes zero
    zero = ops.clipped_linear_weight_grad(x, torch.zeros_like(g), 1.0)
    assert bool((zero == 0).all())


def test_bf16_inputs_accumulate_in_fp32():
    x, g = _inputs(3, 7, 5, 9, torch.float32)
    c = _threshold(x.double(), g.double())
    out = ops.clipped_linear_weight_grad(x.bfloat16(), g.bfloat16(), c)
    assert out.dtype == torch.float32
    ref = reference.clipped_linear_weight_grad(x.bfloat16(), g.bfloat16(), c)
    assert_close(out, ref.float(), rtol=1e-6)


def test_bad_input_names_the_argument():
    x, g = _inputs(3, 7, 5, 9, torch.float32)
    with pytest.raises(ValueError, match="grad_out: batch size B=2"):
        ops.clipped_linear_weight_grad(x, g[:2], 1.0)
    with pytest.raises(ValueError, match="grad_out: token dims T"):
        ops.clipped_linear_weight_grad(x, g[:, :3], 1.0)
    with pytest.raises(ValueError, match="max_norm: expected a finite number > 0, got 0"):
        ops.clipped_linear_weight_grad(x, g, 0.0)
    with pytest.raises(ValueError, match="max_norm"):
        ops.clipped_linear_weight_grad(x, g, -1.0)
    with pytest.raises(TypeError, match="max_norm"):
        ops.clipped_linear_weight_grad(x, g, "1")
    with pytest.raises(ValueError, match="backend"):
        ops.clipped_linear_weight_grad(x, g, 1.0, backend="cuda")
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        ops.clipped_linear_weight_grad(x.long(), g, 1.0)
    with pytest.raises(TypeError, match=r"grad_out: expected a torch\.Tensor"):
        ops.per_sample_norms(x, g.numpy())
    with pytest.raises(ValueError, match="x: expected at least 2 dims"):
        ops.per_sample_norms(x[0, 0], g[0, 0])
    with pytest.raises(ValueError, match="chunk_bytes"):
        ops.clipped_linear_weight_grad(x, g, 1.0, chunk_bytes=0)
