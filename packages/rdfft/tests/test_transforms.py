"""The in-place rdFFT against torch.fft + pack, its identities, and its argument checks."""

import math

import pytest
import rdfft
import torch
from rdfft import complex_to_hc, hc_conj, hc_mul, hc_to_complex, hc_weights
from rdfft.reference import irdfft_reference, rdfft_loops, rdfft_reference

from neurips25_core.testing import assert_close, randn

SIZES = [2**k for k in range(1, 13)]  # 2 ... 4096


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("lead", [(), (3,), (2, 5)])
def test_forward_equals_packed_rfft_float64(n, lead):
    x = randn(*lead, n, dtype=torch.float64, seed=n)
    expected = complex_to_hc(torch.fft.rfft(x), n)
    h = rdfft.rdfft(x, backend="torch")
    assert (h - expected).abs().max().item() <= 1e-10 * n
    back = rdfft.irdfft(h, backend="torch")
    assert (back - x).abs().max().item() <= 1e-10 * n
    assert_close(irdfft_reference(h), x, rtol=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32])
def test_butterfly_loops_match_vectorised(n):
    x = randn(n, dtype=torch.float64, seed=n + 1)
    assert_close(rdfft_loops(x.clone()), rdfft.rdfft(x, backend="torch"), rtol=1e-13)


@pytest.mark.parametrize("n", [2, 16, 256, 4096])
def test_round_trip_float32(n):
    x = randn(7, n, dtype=torch.float32, seed=3)
    back = rdfft.irdfft_(rdfft.rdfft(x))
    tol = 1e-5 * max(1, math.log2(n))
    assert (back - x).abs().max().item() <= tol * x.abs().max().item()


@pytest.mark.parametrize("n", [16, 1024])
def test_bfloat16_against_float32(n):
    # bf16 rounds once per stage (log2 N roundings of relative size 2^-8); documented tolerance:
    # relative norm error below 2^-8 * log2 N forward, twice that for the round trip.
    x = randn(4, n, dtype=torch.float32, seed=5)
    h16 = rdfft.rdfft(x.bfloat16())
    h32 = rdfft.rdfft(x)
    assert h16.dtype == torch.bfloat16
    assert_close(h16.float(), h32, rtol=2**-8 * math.log2(n))
    assert_close(rdfft.irdfft(h16).float(), x, rtol=2**-8 * 2 * math.log2(n))


def test_exact_zero_regression():
    # The official fp32/fp64 kernels skip writes whose new value is 0 and return h[3] = -2 here.
    x = torch.tensor([0.0, 0, 1, 0, 0, 0, -1, 0])
    expected = torch.tensor([0.0, 0, 0, 0, 0, 2, 0, -2])
    for backend in ("torch", "reference"):
        assert torch.equal(rdfft.rdfft(x, backend=backend), expected)
    assert torch.equal(rdfft_loops(x.clone()), expected)


def test_linearity():
    a, b = randn(3, 64, dtype=torch.float64, seed=1), randn(3, 64, dtype=torch.float64, seed=2)
    assert_close(rdfft.rdfft(2.5 * a - b), 2.5 * rdfft.rdfft(a) - rdfft.rdfft(b), rtol=1e-13)


@pytest.mark.parametrize("n", [2, 8, 128])
def test_adjoint(n):
    x, y = randn(n, dtype=torch.float64, seed=1), randn(n, dtype=torch.float64, seed=2)
    lhs = torch.dot(rdfft.rdfft(x), y)
    rhs = torch.dot(x, rdfft.irdfft(hc_weights(n, torch.float64) * y))
    assert abs(lhs - rhs).item() <= 1e-12 * n


@pytest.mark.parametrize("n", [2, 4, 64, 512])
def test_parseval(n):
    x = randn(5, n, dtype=torch.float64, seed=n)
    h = rdfft.rdfft(x)
    m = n // 2
    energy = h[:, 0] ** 2 + h[:, m] ** 2 + 2 * (h[:, 1:m] ** 2 + h[:, m + 1 :] ** 2).sum(-1)
    assert_close(energy / n, (x**2).sum(-1), rtol=1e-13)


@pytest.mark.parametrize("n", [2, 4, 32])
def test_hc_mul_and_conj_are_complex_ops(n):
    a, b = randn(3, n, dtype=torch.float64, seed=1), randn(3, n, dtype=torch.float64, seed=2)
    ac, bc = hc_to_complex(a), hc_to_complex(b)
    assert_close(hc_mul(a, b), complex_to_hc(ac * bc, n), rtol=1e-14)
    assert_close(hc_conj(a), complex_to_hc(ac.conj(), n), rtol=1e-14)
    assert torch.equal(complex_to_hc(hc_to_complex(a), n), a)


def test_weights_are_h_h_transpose():
    n = 16
    eye = torch.eye(n, dtype=torch.float64)
    hmat = rdfft.rdfft(eye, dim=0)  # column i is H e_i
    assert_close(hmat @ hmat.T, torch.diag(hc_weights(n, torch.float64)), rtol=1e-13)


def test_in_place_keeps_storage_and_other_dims():
    x = randn(4, 32, 6, dtype=torch.float32, seed=0)
    moved = x.movedim(1, -1).contiguous()  # (4, 6, 32), transform last
    ptr = moved.data_ptr()
    assert rdfft.rdfft_(moved) is moved and moved.data_ptr() == ptr
    assert_close(moved, rdfft_reference(x.movedim(1, -1)), rtol=1e-6)
    # a non-last dim with stride 1 (a transposed view) also works in place
    t = randn(6, 32, dtype=torch.float64, seed=1).T  # (32, 6), dim 0 has stride 1
    ref = rdfft_reference(t, dim=0)
    ptr = t.data_ptr()
    rdfft.rdfft_(t, dim=0)
    assert t.data_ptr() == ptr
    assert_close(t, ref, rtol=1e-13)


def test_unflattenable_leading_dims_touch_only_the_view():
    base = randn(8, 10, 16, dtype=torch.float64, seed=2)
    untouched = base[:, 1::2].clone()
    view = base[:, ::2]  # leading dims cannot be flattened into one view
    ref = rdfft_reference(view)
    rdfft.rdfft_(view)
    assert_close(base[:, ::2], ref, rtol=1e-13)
    assert torch.equal(base[:, 1::2], untouched)


@pytest.mark.parametrize("n", [0, 1, 3, 12, 100])
def test_bad_length(n):
    with pytest.raises(ValueError, match=r"x\.shape\[0\].*power of two >= 2, got " + str(n)):
        rdfft.rdfft(torch.zeros(n))
    with pytest.raises(ValueError, match="power of two"):
        rdfft.irdfft_(torch.zeros(2, n))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.complex64, torch.float16])
def test_bad_dtype(dtype):
    with pytest.raises(TypeError, match=r"x: expected dtype float32, float64 or bfloat16, got"):
        rdfft.rdfft_(torch.zeros(8, dtype=dtype))


def test_non_contiguous_dim():
    with pytest.raises(ValueError, match=r"x: the transform dim 1 must be contiguous.*stride 3"):
        rdfft.rdfft_(torch.zeros(8, 3).T)
    with pytest.raises(ValueError, match=r"dim: expected a value in \[-2, 1\], got 2"):
        rdfft.rdfft_(torch.zeros(3, 8), dim=2)


def test_leaf_requiring_grad_refused():
    x = torch.zeros(8, requires_grad=True)
    with pytest.raises(
        ValueError, match=r"x: an in-place transform of a leaf tensor that requires"
    ):
        rdfft.rdfft_(x)
    with pytest.raises(ValueError, match=r"h: an in-place .* leaf"):
        rdfft.irdfft_(x)
    assert rdfft.rdfft(x).requires_grad  # the out-of-place one is fine


def test_bad_backend():
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        rdfft.rdfft(torch.zeros(8), backend="cufft")


def test_layout_errors():
    with pytest.raises(TypeError, match=r"y: expected a complex tensor"):
        complex_to_hc(torch.zeros(5), 8)
    with pytest.raises(ValueError, match=r"y: expected last dim n//2\+1 = 5, got 4"):
        complex_to_hc(torch.zeros(4, dtype=torch.complex64), 8)
    with pytest.raises(ValueError, match=r"b: expected last dim 8"):
        hc_mul(torch.zeros(8), torch.zeros(4))
    with pytest.raises(ValueError, match=r"n: expected a power of two >= 2, got 6"):
        hc_weights(6)
