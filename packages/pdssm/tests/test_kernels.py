"""The Triton scan (interpreter on CPU, native on GPU) against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from pdssm import pd_scan
from pdssm.reference import sequential_scan

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, check_forward_backward, poisoned_empty

pytestmark = pytest.mark.skipif(
    not triton_usable(), reason="needs triton with CUDA or TRITON_INTERPRET=1"
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Tiny shapes: the interpreter is slow. N = 5 and 12 are not powers of two.
SHAPES = [(2, 13, 5), (3, 9, 12), (1, 4, 1)]


@pytest.mark.parametrize("chunk", [None, 4, 5])
@pytest.mark.parametrize("orientation", ["column", "row"])
@pytest.mark.parametrize("shape", SHAPES)
def test_triton_kernel_writes_every_state(pd_inputs, shape, orientation, chunk):
    """Sequential kernel (chunk=None) and the three-phase chunked scan, incl. a ragged last chunk."""
    from pdssm.kernels.scan import triton_states

    p, d, b, x0 = pd_inputs(*shape, seed=shape[2], dtype=torch.complex64)
    p, d, b, x0 = (t.to(DEVICE) for t in (p, d, b, x0))
    out = poisoned_empty(*shape, 2, dtype=torch.float32, device=DEVICE)
    states = triton_states(p, d, b, x0, orientation, out=out, chunk=chunk)
    ref = sequential_scan(
        p.cpu(),
        d.cpu().to(torch.complex128),
        b.cpu().to(torch.complex128),
        x0.cpu().to(torch.complex128),
        orientation,
    )
    assert_close(states.cpu(), ref, rtol=1e-5)


@pytest.mark.parametrize("backend", ["triton", "triton_chunked"])
@pytest.mark.parametrize("orientation", ["column", "row"])
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_triton_forward_backward(pd_inputs, shape, orientation, backend):
    p, d, b, x0 = pd_inputs(*shape, seed=shape[1], dtype=torch.complex64)
    p = p.to(DEVICE)
    d, b, x0 = (t.to(DEVICE).requires_grad_() for t in (d, b, x0))
    errors = check_forward_backward(
        lambda d_, b_, x_: pd_scan(p, d_, b_, x_, orientation, backend),
        lambda d_, b_, x_: sequential_scan(p, d_, b_, x_, orientation),
        [d, b, x0],
        rtol=1e-5,
        names=["d", "b", "x0"],
    )
    assert {"grad_d", "grad_b", "grad_x0"} <= set(errors)


def test_triton_straight_through_matrix(pd_inputs):
    """A (B, L, N, N) matrix p: same indices and the same rank-one gradient as the torch path."""
    _, d, b, x0 = pd_inputs(2, 6, 5, seed=1, dtype=torch.complex64)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, 5, 5, generator=g)
    grads = []
    for backend in ("triton", "sequential"):
        m = logits.clone().to(DEVICE).requires_grad_()
        soft = torch.softmax(m, dim=-2)
        x = pd_scan(soft, d.to(DEVICE), b.to(DEVICE), x0.to(DEVICE), backend=backend)
        (x.real.sum() + 2 * x.imag.sum()).backward()
        grads.append((x.detach().cpu(), m.grad.cpu()))
    assert_close(grads[0][0], grads[1][0], rtol=1e-5)
    assert_close(grads[0][1], grads[1][1], rtol=1e-5)


def test_chunk_heuristic():
    from pdssm.kernels.scan import default_chunk

    assert default_chunk(1) == 4 and default_chunk(13) == 4 and default_chunk(17) == 8
    assert default_chunk(8192) == 128


@pytest.mark.parametrize("orientation", ["column", "row"])
def test_triton_layer_matches_float64_reference(orientation):
    """The layer run through the Triton backend: outputs and every parameter gradient vs float64."""
    import copy

    from pdssm import PDSSMLayer

    torch.manual_seed(0)
    layer = PDSSMLayer(6, 7, orientation=orientation, dropout=0.0)
    u = torch.randn(2, 11, 6)
    weight = torch.randn(2, 11, 6)
    ref = copy.deepcopy(layer).double()
    ref.backend = "sequential"
    y_ref = ref(u.double())
    (y_ref * weight.double()).sum().backward()
    ours = copy.deepcopy(layer).to(DEVICE)
    ours.backend = "triton"
    y = ours(u.to(DEVICE))
    (y * weight.to(DEVICE)).sum().backward()
    assert_close(y.detach().cpu(), y_ref.detach().float(), rtol=1e-5)
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        assert_close(p.grad.cpu(), q.grad.float(), rtol=1e-5, name=f"grad {name}")
