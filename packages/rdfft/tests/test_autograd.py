"""Cache-free autograd of rdfft/irdfft: gradcheck, nothing saved, in place under autograd."""

import pytest
import rdfft
import torch
from rdfft.reference import irdfft_reference, rdfft_reference

from neurips25_core.testing import assert_close, check_forward_backward, randn


def _ref_rdfft(x):
    return rdfft.complex_to_hc(torch.fft.rfft(x), x.shape[-1])


def _ref_irdfft(h):
    return torch.fft.irfft(rdfft.hc_to_complex(h), n=h.shape[-1])


@pytest.mark.parametrize("n", [2, 4, 8, 32])
def test_gradcheck_float64(n):
    x = randn(3, n, dtype=torch.float64, seed=n).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: rdfft.rdfft(t), (x,))
    assert torch.autograd.gradcheck(lambda t: rdfft.irdfft(t), (x,))
    # dim != -1 (the backward moves the dim back)
    y = randn(3, n, dtype=torch.float64, seed=1).T.requires_grad_()  # (n, 3), dim 0 stride 1
    assert torch.autograd.gradcheck(lambda t: rdfft.rdfft(t, dim=0), (y,))
    assert torch.autograd.gradcheck(lambda t: rdfft.irdfft(t, dim=0), (y,))


@pytest.mark.parametrize("n", [16, 256])
def test_forward_backward_against_torch_fft(n):
    x = randn(5, 3, n, dtype=torch.float32, seed=7).requires_grad_()
    check_forward_backward(
        lambda t: rdfft.rdfft(t), _ref_rdfft, [x], rtol=1e-6, grad_rtol=1e-6, names=["x"]
    )
    check_forward_backward(
        lambda t: rdfft.irdfft(t), _ref_irdfft, [x], rtol=1e-6, grad_rtol=1e-6, names=["h"]
    )


def test_in_place_chain_saves_nothing_and_keeps_storage():
    x = randn(4, 64, dtype=torch.float32, seed=1).requires_grad_()
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        buf = x * 1.0  # a non-leaf buffer (mul by a Python scalar saves nothing)
        ptr = buf.data_ptr()
        h = rdfft.rdfft_(buf)
        out = rdfft.irdfft_(h * 2.0)
    assert h.data_ptr() == ptr and h is buf
    assert saved == []
    g = randn(4, 64, dtype=torch.float32, seed=2)
    out.backward(g)
    assert_close(x.grad, 2 * g, rtol=1e-6)


def test_modifying_a_saved_input_is_caught():
    x = randn(2, 16, dtype=torch.float32, seed=1).requires_grad_()
    y = x * 1.0
    z = y.sin()  # saves y
    rdfft.rdfft_(y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_reference_backend_under_autograd():
    x = randn(3, 8, dtype=torch.float64, seed=4).requires_grad_()
    h = rdfft.rdfft(x, backend="reference")
    assert_close(h, rdfft_reference(x.detach()), rtol=1e-14)
    assert torch.autograd.gradcheck(lambda t: rdfft.irdfft(t, backend="reference"), (x,))
    assert_close(rdfft.irdfft(h.detach()), irdfft_reference(h.detach()), rtol=1e-13)


def test_bfloat16_backward_runs():
    x = randn(2, 32, dtype=torch.bfloat16, seed=0).requires_grad_()
    rdfft.irdfft(rdfft.rdfft(x)).float().square().sum().backward()
    assert_close(x.grad.float(), 2 * x.detach().float(), rtol=2**-8 * 10)
