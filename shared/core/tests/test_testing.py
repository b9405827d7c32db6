import math

import pytest
import torch

from neurips25_core.testing import (
    assert_close,
    check_forward_backward,
    default_rtol,
    poisoned_empty,
    poisoned_empty_like,
    randint,
    randn,
    relative_error,
    sqnr,
)


def test_relative_error_is_the_relative_norm():
    ref = torch.tensor([3.0, 4.0])
    out = torch.tensor([3.0, 4.5])
    assert relative_error(out, ref) == pytest.approx(0.5 / 5.0)


def test_assert_close_passes_within_and_fails_beyond_tolerance():
    ref = randn(7, 13, seed=1, dtype=torch.float64)
    err = assert_close(ref + 1e-12 * randn(7, 13, seed=2, dtype=torch.float64), ref)
    assert err < 1e-10
    with pytest.raises(AssertionError, match=r"relative error .* > rtol .*shape \(7, 13\)"):
        assert_close(ref * (1 + 1e-3), ref)


def test_assert_close_default_tolerance_follows_the_lower_precision_dtype():
    ref = randn(64, seed=3, dtype=torch.float64)
    noisy = ref + 1e-3 * ref.abs().max() * randn(64, seed=4, dtype=torch.float64)
    assert default_rtol(torch.bfloat16) > default_rtol(torch.float32) > default_rtol(torch.float64)
    assert_close(noisy.bfloat16(), ref)  # within bf16's 1.6e-2
    with pytest.raises(AssertionError):
        assert_close(noisy.float(), ref)  # but not fp32's 1e-5


def test_assert_close_catches_nan_and_shape_mismatch():
    ref = torch.ones(5)
    out = ref.clone()
    out[2] = float("nan")
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close(out, ref)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(torch.ones(4), ref)


def test_sqnr_in_decibels():
    ref = torch.ones(100, dtype=torch.float64)
    assert sqnr(ref, ref * 1.1) == pytest.approx(20.0)
    assert math.isinf(sqnr(ref, ref))


def test_seeded_inputs_are_reproducible_across_dtypes():
    a = randn(3, 4, seed=7, dtype=torch.float64)
    b = randn(3, 4, seed=7, dtype=torch.float32)
    assert torch.equal(a.float(), b)
    assert not torch.equal(randn(3, 4, seed=8), b)
    c = randn(2, 3, seed=1, dtype=torch.complex64)
    assert c.is_complex() and c.shape == (2, 3)
    i = randint(0, 5, 100, seed=0)
    assert i.dtype == torch.int64 and int(i.min()) >= 0 and int(i.max()) < 5


def test_poisoned_buffers():
    x = poisoned_empty(3, 5)
    assert torch.isnan(x).all()
    y = poisoned_empty_like(torch.zeros(2, dtype=torch.int32))
    assert (y == torch.iinfo(torch.int32).min).all()


def _softplus_fast(x, w):
    return torch.nn.functional.softplus(x @ w)


def _softplus_ref(x, w):
    return torch.log1p(torch.exp(x @ w))


def test_check_forward_backward_compares_outputs_and_gradients():
    x = randn(5, 7, seed=0, requires_grad=True)
    w = randn(7, 3, seed=1, requires_grad=True)
    errors = check_forward_backward(_softplus_fast, _softplus_ref, [x, w], names=["x", "w"])
    assert set(errors) == {"out0", "grad_x", "grad_w"}
    assert all(e < 1e-5 for e in errors.values())


def test_check_forward_backward_detects_a_wrong_gradient():
    class WrongGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3  # wrong on purpose: the true derivative is 2

    x = randn(4, 4, seed=0, requires_grad=True)
    with pytest.raises(AssertionError, match="grad of x"):
        check_forward_backward(WrongGrad.apply, lambda t: t * 2, [x], names=["x"])


def test_check_forward_backward_refuses_a_detached_output():
    from neurips25_core.testing import check_forward_backward

    t = randn(4, 3, seed=0, requires_grad=True)
    with pytest.raises(AssertionError, match="does not require grad"):
        check_forward_backward(lambda t: (t * 2).detach(), lambda t: t * 2, [t])
    errors = check_forward_backward(lambda t: t * 2, lambda t: t * 2, [t])
    assert errors["grad_input0"] < 1e-6


def test_check_forward_backward_refuses_a_missing_input_gradient():
    from neurips25_core.testing import check_forward_backward

    a = randn(4, seed=0, requires_grad=True)
    b = randn(4, seed=1, requires_grad=True)
    with pytest.raises(AssertionError, match="grad of input1"):
        check_forward_backward(lambda a, b: a * b.detach(), lambda a, b: a * b, [a, b])


def test_fp32_default_tolerance_is_the_documented_one():
    from neurips25_core.testing import FP32_RTOL, default_rtol

    assert default_rtol(torch.float32) == FP32_RTOL == 1e-5
