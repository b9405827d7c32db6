"""The quantizers and the weight bias correction against their float64 references."""

from __future__ import annotations

import pytest
import torch
from multibitq import reference
from multibitq.ops import correct_weight_bias, quantize_activation, quantize_weight

from neurips25_core.testing import assert_close, check_forward_backward, randn

LOW_BITS = (1, 2, 3, 4, 5, 6, 7, 8)
SHAPES = ((7, 5, 3, 3), (11, 13))


@pytest.mark.parametrize("bits", LOW_BITS)
@pytest.mark.parametrize("shape", SHAPES)
def test_weight_levels_lie_on_the_grid(bits, shape):
    w = randn(*shape, seed=bits, dtype=torch.float64)
    out = quantize_weight(w, bits)
    scale = w.abs().mean()
    levels = 2**bits - 1
    j = (out / scale + 1) * levels / 2  # must be integers in [0, levels]
    assert torch.allclose(j, j.round(), atol=1e-9)
    assert j.round().min() >= 0 and j.round().max() <= levels
    assert torch.unique(j.round()).numel() <= 2**bits
    assert torch.equal(out, reference.quantize_weight(w, bits))


def test_one_bit_is_plus_minus_mean_abs():
    w = randn(6, 9, seed=3, dtype=torch.float64)
    out = quantize_weight(w, 1)
    assert set((out / w.abs().mean()).round().unique().tolist()) <= {-1.0, 1.0}


@pytest.mark.parametrize("shape", SHAPES)
def test_full_precision_child_is_scaled_tanh(shape):
    w = randn(*shape, seed=1, dtype=torch.float64)
    t = torch.tanh(w)
    assert_close(quantize_weight(w, 32), w.abs().mean() * t / t.abs().max(), rtol=1e-15)


@pytest.mark.parametrize("bits", LOW_BITS)
def test_activation_grid_and_ties_to_even(bits):
    x = randn(4, 5, 6, seed=bits, dtype=torch.float64, scale=1.5)
    out = quantize_activation(x, bits)
    levels = 2**bits - 1
    assert torch.allclose(out * levels, (out * levels).round(), atol=1e-12)
    assert out.min() >= 0 and out.max() <= 1
    assert torch.equal(out, reference.quantize_activation(x, bits))
    # exact ties: x·levels = j + 1/2 rounds to the even neighbour
    j = torch.arange(levels, dtype=torch.float64)
    ties = quantize_activation((j + 0.5) / levels, bits) * levels
    expected = torch.where(j % 2 == 0, j, j + 1)
    assert torch.equal(ties.round(), expected)


def test_activation_at_32_bits_is_relu():
    x = randn(3, 7, seed=2, scale=3.0)
    assert torch.equal(quantize_activation(x, 32), torch.relu(x))


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 32])
@pytest.mark.parametrize("shape", SHAPES)
def test_weight_ste_gradient_is_the_round_free_autograd(bits, shape):
    check_forward_backward(
        lambda w: quantize_weight(w, bits),
        lambda w: reference.quantize_weight(w, bits),
        [randn(*shape, seed=bits, dtype=torch.float64)],
        rtol=1e-12,
        grad_rtol=1e-12,
    )
    # backward of the op = autograd of the surrogate (round -> identity)
    w = randn(*shape, seed=bits + 10, dtype=torch.float64, requires_grad=True)
    g = randn(*shape, seed=bits + 20, dtype=torch.float64)
    (ours,) = torch.autograd.grad(quantize_weight(w, bits), w, g)
    (ref,) = torch.autograd.grad(reference.quantize_weight_surrogate(w, bits), w, g)
    assert_close(ours, ref, rtol=1e-12)


@pytest.mark.parametrize("bits", [1, 3, 8, 32])
def test_activation_ste_gradient_is_the_round_free_autograd(bits):
    x = randn(5, 9, seed=bits, dtype=torch.float64, scale=1.5, requires_grad=True)
    g = randn(5, 9, seed=bits + 1, dtype=torch.float64)
    (ours,) = torch.autograd.grad(quantize_activation(x, bits), x, g)
    (ref,) = torch.autograd.grad(reference.quantize_activation_surrogate(x, bits), x, g)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float32_matches_the_float64_reference_off_ties(dtype):
    w = randn(9, 4, 3, 3, seed=5, dtype=dtype)
    out = quantize_weight(w, 4)
    ref = reference.quantize_weight(w, 4)
    # fp32 may land on the other side of a rounding boundary for a few weights; count them
    levels_apart = ((out.double() - ref).abs() / (2 * w.double().abs().mean() / 15)).round()
    assert out.dtype == dtype
    assert (levels_apart > 1).sum() == 0 and (levels_apart == 1).float().mean() < 0.01


# ----- correction -----------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("shape", SHAPES)
def test_correction_matches_reference_channel_statistics(bits, shape):
    w = randn(*shape, seed=bits, dtype=torch.float64)
    w_ref = quantize_weight(w, 32)
    w_q = quantize_weight(w, bits)
    out = correct_weight_bias(w_q, w_ref)
    assert_close(out, reference.correct_weight_bias(w_q, w_ref), rtol=1e-13)
    flat, flat_ref = out.reshape(shape[0], -1), w_ref.reshape(shape[0], -1)
    torch.testing.assert_close(flat.mean(1), flat_ref.mean(1), atol=1e-12, rtol=0)
    std = flat.std(1, unbiased=False)
    std_ref = flat_ref.std(1, unbiased=False)
    nonconstant = w_q.reshape(shape[0], -1).std(1) > 0
    torch.testing.assert_close(std[nonconstant], std_ref[nonconstant], atol=1e-12, rtol=0)
    # order within each channel kept, at most 2^b values per channel (a b-bit code per channel)
    q_flat = w_q.reshape(shape[0], -1)
    for c in range(shape[0]):
        assert torch.equal(
            torch.argsort(flat[c], stable=True), torch.argsort(q_flat[c], stable=True)
        )
        assert flat[c].unique().numel() <= 2**bits


def test_correction_tensor_granularity_and_mean_mode():
    w = randn(5, 6, 3, 3, seed=4, dtype=torch.float64)
    w_ref, w_q = quantize_weight(w, 32), quantize_weight(w, 2)
    for granularity in ("tensor", "channel"):
        for mode in ("mean", "mean_var"):
            out = correct_weight_bias(w_q, w_ref, granularity=granularity, mode=mode)
            ref = reference.correct_weight_bias(w_q, w_ref, granularity=granularity, mode=mode)
            assert_close(out, ref, rtol=1e-13)
    out = correct_weight_bias(w_q, w_ref, granularity="tensor")
    assert abs(out.mean() - w_ref.mean()) < 1e-12
    assert abs(out.std(unbiased=False) - w_ref.std(unbiased=False)) < 1e-12


def test_correction_is_the_identity_for_the_full_precision_child():
    w_ref = quantize_weight(randn(4, 3, 3, 3, seed=0), 32)
    assert correct_weight_bias(w_ref, w_ref) is w_ref
    w_ref64 = w_ref.double()
    assert torch.equal(correct_weight_bias(w_ref64, w_ref64), w_ref64)


def test_constant_and_zero_tensors_stay_finite():
    w_ref = randn(3, 8, seed=1, dtype=torch.float64)
    const = torch.full((3, 8), 0.7, dtype=torch.float64)
    out = correct_weight_bias(const, w_ref)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.mean(1), w_ref.mean(1), atol=1e-12, rtol=0)
    zeros = torch.zeros(3, 8, dtype=torch.float64)
    for w_q, ref in ((zeros, zeros.clone()), (zeros, w_ref), (w_ref, zeros.clone())):
        for stats_grad in (False, True):
            x = w_q.clone().requires_grad_()
            out = correct_weight_bias(x, ref, stats_grad=stats_grad)
            out.sum().backward()
            assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert torch.equal(quantize_weight(zeros, 3), zeros)
    assert torch.equal(quantize_weight(zeros, 32), zeros)


def test_correction_gradient_without_stats_grad_is_the_closed_form():
    w_q = randn(4, 7, seed=2, dtype=torch.float64, requires_grad=True)
    w_ref = randn(4, 7, seed=3, dtype=torch.float64, requires_grad=True)
    g = randn(4, 7, seed=4, dtype=torch.float64)
    gq, gr = torch.autograd.grad(
        correct_weight_bias(w_q, w_ref), (w_q, w_ref), g, allow_unused=True
    )
    ratio = w_ref.std(1, unbiased=False, keepdim=True) / w_q.std(1, unbiased=False, keepdim=True)
    assert_close(gq, ratio.detach() * g, rtol=1e-14)
    assert gr is None or torch.equal(gr, torch.zeros_like(gr))


@pytest.mark.parametrize("shape", [(3, 2, 2, 2), (4, 5)])
def test_stats_grad_passes_gradcheck_on_the_surrogate(shape):
    # the round-free surrogate makes w_q a smooth function of w; E is a detached constant, so
    # the statistics' gradient is checked with respect to the two weights as independent inputs
    w = randn(*shape, seed=7, dtype=torch.float64)
    w_q = reference.quantize_weight_surrogate(w, 2).detach() * 0.5 + w * 0.3
    w_q = w_q.requires_grad_()
    w_ref = reference.quantize_weight_surrogate(w, 32).detach().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: correct_weight_bias(a, b, stats_grad=True), (w_q, w_ref)
    )
    assert torch.autograd.gradcheck(
        lambda a, b: correct_weight_bias(a, b, stats_grad=True, granularity="tensor"), (w_q, w_ref)
    )
    check_forward_backward(
        lambda a, b: correct_weight_bias(a, b, stats_grad=True),
        lambda a, b: reference.correct_weight_bias(a, b, stats_grad=True),
        [w_q.detach(), w_ref.detach()],
        rtol=1e-12,
        grad_rtol=1e-10,
    )
