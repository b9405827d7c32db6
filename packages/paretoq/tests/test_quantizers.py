"""The quantizers: level sets, thresholds, STE masks and α-gradients against closed forms (float64)."""

from __future__ import annotations

from fractions import Fraction

import paretoq
import pytest
import torch
from paretoq.reference import (
    SEQ_CLIP,
    alpha_init_reference,
    grad_scale,
    level_set,
    quantize_autograd_reference,
    quantize_grads_reference,
    quantize_reference,
)

from neurips25_core.testing import assert_close, randn

BITS = (1, 1.58, 2, 3, 4)
SHAPES = [(7, 13), (16, 33), (1, 5)]


def _weights(shape, seed, dtype=torch.float64):
    """Weights with a spread of magnitudes and a per-row scale around them (some rows saturate)."""
    w = randn(*shape, seed=seed, dtype=dtype)
    alpha = randn(shape[0], 1, seed=seed + 1, dtype=dtype).abs() * 0.8 + 0.3
    return w, alpha


@pytest.mark.parametrize("bits", BITS)
def test_level_set_is_exact(bits):
    w = randn(64, 257, seed=3, dtype=torch.float64, scale=3.0)
    alpha = alpha_init_reference(w, bits) * 0.6  # push part of every row into saturation
    q = (paretoq.quantize_weight(w, alpha, bits) / alpha).flatten()
    levels = sorted({Fraction(v).limit_denominator(12) for v in q.tolist()})
    assert levels == level_set(bits)
    # Every value is exactly a level (not only close to one).
    as_float = torch.tensor([float(v) for v in level_set(bits)], dtype=torch.float64)
    dist = (q[:, None] - as_float[None, :]).abs().min(dim=1).values
    assert float(dist.max()) < 1e-12


@pytest.mark.parametrize("bits", [1.58, 2])
def test_seq_has_no_level_at_the_clip(bits):
    x = torch.tensor(
        [[-10.0, -1.0, -SEQ_CLIP, -0.995, 0.995, SEQ_CLIP, 1.0, 10.0]], dtype=torch.float64
    )
    q = paretoq.quantize_weight(x, torch.ones(1, 1, dtype=torch.float64), bits)
    top = 2 / 3 if bits == 1.58 else 0.75
    assert torch.equal(q.abs(), torch.full_like(q, top))
    assert float(q.abs().max()) < 1.0


def test_ternary_thresholds_at_one_third():
    eps = 1e-9
    x = torch.tensor(
        [[-1 / 3 - eps, -1 / 3 + eps, 0.0, 1 / 3 - eps, 1 / 3 + eps]], dtype=torch.float64
    )
    q = paretoq.quantize_weight(x, torch.ones(1, 1, dtype=torch.float64), 1.58)
    assert q.tolist() == [[-2 / 3, 0.0, 0.0, 0.0, 2 / 3]]


def test_two_bit_thresholds_and_half_even_tie():
    eps = 1e-9
    x = torch.tensor(
        [[-0.5 - eps, -0.5 + eps, -eps, 0.0, eps, 0.5 - eps, 0.5 + eps]], dtype=torch.float64
    )
    q = paretoq.quantize_weight(x, torch.ones(1, 1, dtype=torch.float64), 2)
    # x = 0: round(0·2 − 0.5) = round(−0.5) = −0 (half to even) → +0.25.
    assert q.tolist() == [[-0.75, -0.25, -0.25, 0.25, 0.25, 0.25, 0.75]]


@pytest.mark.parametrize("bits", [3, 4])
def test_lsq_rounds_half_to_even_and_clamps(bits):
    qn, qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    x = torch.tensor(
        [[0.5, 1.5, 2.5, -0.5, -1.5, qp + 0.4, qp + 3.0, qn - 0.4, qn - 5.0]], dtype=torch.float64
    )
    q = paretoq.quantize_weight(x, torch.ones(1, 1, dtype=torch.float64), bits)
    assert q.tolist() == [[0.0, 2.0, 2.0, -0.0, -2.0, qp, qp, qn, qn]]


def test_binary_sign_of_zero_is_zero():
    x = torch.tensor([[-0.3, 0.0, 0.7, 5.0]], dtype=torch.float64)
    q = paretoq.quantize_weight(x, torch.full((1, 1), 0.5, dtype=torch.float64), 1)
    assert q.tolist() == [[-0.5, 0.0, 0.5, 0.5]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_equals_reference_bitwise(bits, shape, dtype):
    w, alpha = _weights(shape, seed=11, dtype=dtype)
    assert torch.equal(paretoq.quantize_weight(w, alpha, bits), quantize_reference(w, alpha, bits))


@pytest.mark.parametrize("mode", ["paretoq", "exact"])
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("shape", SHAPES)
def test_gradients_equal_closed_form_float64(bits, shape, mode):
    w, alpha = _weights(shape, seed=5)
    w.requires_grad_(True)
    alpha.requires_grad_(True)
    grad_out = randn(*shape, seed=99, dtype=torch.float64)
    out = paretoq.quantize_weight(w, alpha, bits, ternary_alpha_grad=mode)
    gw, ga = torch.autograd.grad(out, (w, alpha), grad_out)
    rw, ra = quantize_grads_reference(w.detach(), alpha.detach(), bits, grad_out, mode)
    assert ga.shape == alpha.shape
    assert_close(gw, rw, rtol=1e-12, name="grad w")
    assert_close(ga, ra, rtol=1e-12, name="grad alpha")
    assert torch.allclose(ga, ra, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    ("bits", "mode"),
    [(1, "paretoq"), (1.58, "exact"), (2, "paretoq"), (3, "paretoq"), (4, "paretoq")],
)
@pytest.mark.parametrize("shape", SHAPES)
def test_gradients_equal_round_ste_autograd(bits, mode, shape):
    """A second derivation: LSQ-style round_ste + grad_scale under plain autograd."""
    w, alpha = _weights(shape, seed=21)
    grad_out = randn(*shape, seed=7, dtype=torch.float64)
    w1, a1 = w.clone().requires_grad_(True), alpha.clone().requires_grad_(True)
    w2, a2 = w.clone().requires_grad_(True), alpha.clone().requires_grad_(True)
    out1 = paretoq.quantize_weight(w1, a1, bits, ternary_alpha_grad=mode)
    out2 = quantize_autograd_reference(w2, a2, bits)
    assert_close(out1, out2, rtol=1e-12)
    g1 = torch.autograd.grad(out1, (w1, a1), grad_out)
    g2 = torch.autograd.grad(out2, (w2, a2), grad_out)
    assert torch.allclose(g1[0], g2[0], rtol=1e-6, atol=1e-12)
    assert torch.allclose(g1[1], g2[1], rtol=1e-6, atol=1e-12)


def test_ternary_official_differs_from_exact_only_in_saturation():
    w, alpha = _weights((9, 31), seed=2)
    grad_out = randn(9, 31, seed=8, dtype=torch.float64)
    x = w / alpha
    _, ga_off = quantize_grads_reference(w, alpha, 1.58, grad_out, "paretoq")
    _, ga_ex = quantize_grads_reference(w, alpha, 1.58, grad_out, "exact")
    g = grad_scale(w.numel(), 1.58)
    sat = (x.abs() > SEQ_CLIP).to(torch.float64)
    diff = (g * torch.sign(x) * sat * grad_out * (1 - 2 / 3)).sum(-1, keepdim=True)
    assert sat.sum() > 0
    assert torch.allclose(ga_off - ga_ex, diff, rtol=1e-10, atol=1e-14)


def _alpha_finite_difference(w, alpha, bits, grad_out, h=1e-7):
    plus = (quantize_reference(w, alpha + h, bits) * grad_out).sum(-1, keepdim=True)
    minus = (quantize_reference(w, alpha - h, bits) * grad_out).sum(-1, keepdim=True)
    return (plus - minus) / (2 * h)


@pytest.mark.parametrize("bits", [1.58, 2, 3, 4])
def test_finite_differences_in_saturation(bits):
    """Where every weight is saturated, Q is locally flat: finite differences are the true ∂/∂α."""
    g = torch.Generator().manual_seed(0)
    alpha = torch.rand(6, 1, dtype=torch.float64, generator=g) + 0.5
    qp = 2 ** (int(bits) - 1) if bits in (3, 4) else 1
    sign = torch.where(torch.rand(6, 20, dtype=torch.float64, generator=g) < 0.5, -1.0, 1.0)
    w = sign * alpha * (qp + 0.6 + torch.rand(6, 20, dtype=torch.float64, generator=g))
    grad_out = randn(6, 20, seed=1, dtype=torch.float64)
    fd = _alpha_finite_difference(w, alpha, bits, grad_out) * grad_scale(w.numel(), bits)
    a = alpha.clone().requires_grad_(True)
    exact = torch.autograd.grad(
        paretoq.quantize_weight(w, a, bits, ternary_alpha_grad="exact"), a, grad_out
    )[0]
    assert torch.allclose(exact, fd, rtol=1e-6, atol=1e-12)
    if bits == 1.58:
        official = torch.autograd.grad(paretoq.quantize_weight(w, a, bits), a, grad_out)[0]
        # The quirk: the official saturated α-gradient is 1.5× the derivative.
        assert torch.allclose(official, 1.5 * fd, rtol=1e-6, atol=1e-12)
        assert not torch.allclose(official, fd, rtol=1e-2)


def test_binary_alpha_gradient_is_the_derivative_everywhere():
    w, alpha = _weights((5, 17), seed=4)
    grad_out = randn(5, 17, seed=2, dtype=torch.float64)
    fd = _alpha_finite_difference(w, alpha, 1, grad_out) * grad_scale(w.numel(), 1)
    a = alpha.clone().requires_grad_(True)
    got = torch.autograd.grad(paretoq.quantize_weight(w, a, 1), a, grad_out)[0]
    assert torch.allclose(got, fd, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize(
    ("bits", "lo", "hi"),
    [
        (1, -1.0, 1.0),
        (1.58, -SEQ_CLIP, SEQ_CLIP),
        (2, -SEQ_CLIP, SEQ_CLIP),
        (3, -4.0, 3.0),
        (4, -8.0, 7.0),
    ],
)
def test_ste_mask_boundaries(bits, lo, hi):
    d = 1e-9
    x = torch.tensor(
        [[lo - d, lo, lo + d, 0.1, hi - d, hi, hi + d]], dtype=torch.float64, requires_grad=True
    )
    grad_out = torch.arange(1.0, 8.0, dtype=torch.float64)[None]
    out = paretoq.quantize_weight(x, torch.ones(1, 1, dtype=torch.float64), bits)
    (gw,) = torch.autograd.grad(out, x, grad_out)
    assert gw.tolist() == [[0.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0]]


def test_grad_scale_values():
    n = 6 * 20
    assert grad_scale(n, 1) == grad_scale(n, 1.58) == grad_scale(n, 2) == 1 / n**0.5
    assert grad_scale(n, 3) == 1 / (3 * n) ** 0.5
    assert grad_scale(n, 4) == 1 / (7 * n) ** 0.5


@pytest.mark.parametrize("bits", BITS)
def test_alpha_init(bits):
    w = randn(5, 9, seed=1, dtype=torch.float64)
    a = paretoq.alpha_init(w, bits)
    expected = {
        1: w.abs().mean(-1, keepdim=True),
        1.58: w.abs().amax(-1, keepdim=True),
        2: w.abs().amax(-1, keepdim=True),
        3: w.abs().amax(-1, keepdim=True) / 3,
        4: w.abs().amax(-1, keepdim=True) / 7,
    }[bits]
    assert torch.equal(a, expected)
    assert torch.equal(a, alpha_init_reference(w, bits))


@pytest.mark.parametrize("bits", BITS)
def test_alpha_is_clamped_at_1e_minus_5(bits):
    w = torch.tensor([[3e-5, -7e-6, 1e-6]], dtype=torch.float64)
    zero = paretoq.quantize_weight(w, torch.zeros(1, 1, dtype=torch.float64), bits)
    tiny = paretoq.quantize_weight(w, torch.full((1, 1), 1e-5, dtype=torch.float64), bits)
    neg = paretoq.quantize_weight(w, torch.full((1, 1), -3.0, dtype=torch.float64), bits)
    assert torch.equal(zero, tiny)
    assert torch.equal(neg, tiny)
    # The gradient still reaches α (the official code does not mask it by the clamp).
    a = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    (ga,) = torch.autograd.grad(paretoq.quantize_weight(w, a, bits).sum(), a)
    assert ga.item() != 0.0


def test_bits_16_is_identity():
    w = randn(3, 4, seed=0, requires_grad=True)
    assert paretoq.quantize_weight(w, None, 16) is w


@pytest.mark.parametrize("bits", [0, 5, 8, 1.5, 2.0001, "2", True, None])
def test_bad_bits(bits):
    w = randn(3, 4, seed=0)
    with pytest.raises((ValueError, TypeError), match="bits"):
        paretoq.quantize_weight(w, torch.ones(3, 1), bits)


def test_bad_weight_and_alpha():
    w = randn(3, 4, seed=0)
    with pytest.raises(ValueError, match="w: expected a 2-D"):
        paretoq.quantize_weight(w[None], torch.ones(3, 1), 2)
    with pytest.raises(ValueError, match=r"alpha: expected shape \(3, 1\)"):
        paretoq.quantize_weight(w, torch.ones(3), 2)
    with pytest.raises(ValueError, match=r"alpha: expected shape \(3, 1\)"):
        paretoq.quantize_weight(w, torch.ones(1, 1), 2)
    with pytest.raises(ValueError, match="alpha: contains NaN"):
        paretoq.quantize_weight(w, torch.tensor([[1.0], [float("nan")], [1.0]]), 2)
    with pytest.raises(TypeError, match="w: expected a floating"):
        paretoq.quantize_weight(torch.ones(3, 4, dtype=torch.int32), torch.ones(3, 1), 2)
    with pytest.raises(TypeError, match="alpha"):
        paretoq.quantize_weight(w, [[1.0]] * 3, 2)
    with pytest.raises(ValueError, match="ternary_alpha_grad"):
        paretoq.quantize_weight(w, torch.ones(3, 1), 1.58, ternary_alpha_grad="true")


def _alpha_grad_same_decisions(w, alpha, bits, grad_out):
    """float64 α-gradient with the low-precision forward's decisions (masks, rounding): the sum the
    low-precision backward approximates, every value and the sum in float64."""
    x = w / alpha  # the forward's dtype: which bin each weight falls in
    xd = w.double() / alpha.double()
    if bits == 1:
        per = torch.sign(w).double()
    elif bits in (1.58, 2):
        n, s = (1.5, 0.0) if bits == 1.58 else (2.0, 0.5)
        qp = (n - s) / n
        r = torch.round(torch.clamp(x, -SEQ_CLIP, SEQ_CLIP) * n - s).double()
        per = torch.where(x < -SEQ_CLIP, -qp, torch.where(x > SEQ_CLIP, qp, (r + s) / n - xd))
    else:
        qn, qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        mid = torch.round(x).double() - xd
        per = torch.where(x < qn, float(qn), torch.where(x > qp, float(qp), mid))
    return (per.double() * grad_out.double() * grad_scale(w.numel(), bits)).sum(-1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bits", BITS)
def test_low_precision_alpha_gradient_is_accumulated_in_fp32(bits, dtype):
    """bf16/fp16 weights: the α-gradient is built and summed in fp32 (as the official code), so it
    equals the float64 sum up to the final rounding to ``dtype`` (relative 2^-8 per element)."""
    gen = torch.Generator().manual_seed(int(bits * 100))
    w = (torch.randn(48, 301, generator=gen) * 0.02).to(dtype)
    alpha = paretoq.alpha_init(w.float(), bits).to(dtype)
    grad_out = torch.randn(48, 301, generator=gen).to(dtype)
    w1, a1 = w.clone().requires_grad_(True), alpha.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(paretoq.quantize_weight(w1, a1, bits), a1, grad_out)
    assert ga.dtype == dtype and ga.shape == alpha.shape
    ref = _alpha_grad_same_decisions(w, alpha, bits, grad_out)
    assert_close(ga.double(), ref, rtol=2**-8, name=f"{bits}-bit {dtype} grad alpha")
    # built in the low dtype instead (the old code), the 3/4-bit error is several times larger
    x = w / alpha
    if bits in (3, 4):
        qn, qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        sat = torch.where(x < qn, torch.full_like(x, qn), torch.full_like(x, qp))
        per = torch.where((x >= qn) & (x <= qp), torch.round(x) - x, sat)
        low = (per * grad_out * grad_scale(w.numel(), bits)).sum(-1, keepdim=True)
        err_low = float((low.double() - ref).norm() / ref.norm())
        err_ours = float((ga.double() - ref).norm() / ref.norm())
        assert err_ours < err_low
