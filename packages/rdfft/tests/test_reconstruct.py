"""Reconstruct mode: output overwrites input, backward rebuilds X = P⁻¹ Y; matches cache mode."""

import pytest
import torch
from rdfft import BlockCirculantLinear, circulant_reconstruct_
from rdfft.layers import block_circulant_matmul
from rdfft.reference import block_circulant_dense

from neurips25_core.testing import assert_close, randn


def _well_conditioned(q, p, dtype=torch.float64, seed=0):
    """c with W = I + small block-circulant noise: every P_k is near the identity."""
    c = 0.1 * randn(q, q, p, dtype=dtype, seed=seed) / (q * p) ** 0.5
    for i in range(q):
        c[i, i, 0] += 1.0
    return c


@pytest.mark.parametrize(("q", "p", "lead"), [(1, 8, (5,)), (3, 4, (2, 3)), (2, 16, (7,))])
def test_forward_equals_dense_reference_in_place(q, p, lead):
    c = _well_conditioned(q, p, seed=q + p)
    x = randn(*lead, q * p, dtype=torch.float64, seed=1)
    expected = x @ block_circulant_dense(c).T
    buf = x.clone()
    ptr = buf.data_ptr()
    out = circulant_reconstruct_(buf, c)
    assert out is buf and out.data_ptr() == ptr
    assert_close(out, expected, rtol=1e-12)


def test_gradcheck_float64():
    c = _well_conditioned(2, 4, seed=3).requires_grad_()
    b = randn(8, dtype=torch.float64, seed=4).requires_grad_()
    x = randn(3, 8, dtype=torch.float64, seed=5).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, c, b: circulant_reconstruct_(x * 1.0, c, b), (x, c, b)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_cache_mode(dtype):
    c = _well_conditioned(3, 32, dtype=dtype, seed=6).requires_grad_()
    x = randn(4, 5, 96, dtype=dtype, seed=7).requires_grad_()
    g = randn(4, 5, 96, dtype=dtype, seed=8)
    ref = block_circulant_matmul(x, c, "rdfft")
    ref_gx, ref_gc = torch.autograd.grad(ref, (x, c), g)
    out = circulant_reconstruct_(x * 1.0, c)
    gx, gc = torch.autograd.grad(out, (x, c), g)
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    assert_close(out, ref, rtol=rtol)
    assert_close(gx, ref_gx, rtol=rtol)
    assert_close(gc, ref_gc, rtol=rtol)


def test_saves_only_the_output_and_c():
    c = _well_conditioned(2, 32, dtype=torch.float32, seed=9).requires_grad_()
    x = randn(6, 64, seed=10).requires_grad_()
    h = x * 1.0
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = circulant_reconstruct_(h, c)
    ptrs = {t.untyped_storage().data_ptr() for t in saved}
    assert ptrs == {out.untyped_storage().data_ptr(), c.untyped_storage().data_ptr()}
    # cache mode keeps X (a tensor the size of x) and P besides
    cached = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: cached.append(t) or t, lambda t: t):
        block_circulant_matmul(x * 1.0, c, "rdfft")
    assert sum(t.numel() for t in cached) > x.numel()


def test_layer_chain_trains_like_cache_mode():
    torch.manual_seed(0)
    layers = [BlockCirculantLinear(64, 64, 16, bias=True, reconstruct=True) for _ in range(3)]
    cache = [BlockCirculantLinear(64, 64, 16, bias=True) for _ in range(3)]
    with torch.no_grad():
        for a, b in zip(layers, cache):
            a.c.copy_(_well_conditioned(4, 16, torch.float32, seed=id(a) % 97))
            a.bias.normal_()
            b.load_state_dict(a.state_dict())
    x = randn(5, 64, seed=11)

    def run(stack):
        h = x.clone()
        for i, layer in enumerate(stack):
            h = layer(h)
            # gelu saves its input (this layer's output, stored once for both) and not its
            # output, which the next layer then overwrites; tanh (saves its output) would not do
            h = torch.nn.functional.gelu(h) if i < len(stack) - 1 else h
        return h.square().sum()

    run(layers).backward()
    run(cache).backward()
    for a, b in zip(layers, cache):
        assert_close(a.c.grad, b.c.grad, rtol=1e-5)
        assert_close(a.bias.grad, b.bias.grad, rtol=1e-5)
    assert "reconstruct=True" in repr(layers[0])


def test_modifying_the_output_before_backward_is_caught():
    c = _well_conditioned(1, 8, torch.float32, seed=12).requires_grad_()
    out = circulant_reconstruct_(randn(2, 8, seed=13), c)
    out.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_bad_input():
    c = _well_conditioned(2, 8, torch.float32)
    with pytest.raises(ValueError, match="c: reconstruct mode needs a well-conditioned P"):
        circulant_reconstruct_(torch.randn(3, 16), torch.zeros(2, 2, 8))
    x = torch.randn(3, 16)
    before = x.clone()
    with pytest.raises(ValueError, match="well-conditioned"):
        circulant_reconstruct_(x, torch.ones(2, 2, 8))  # P singular at every frequency
    assert torch.equal(x, before)  # refused before anything was overwritten
    with pytest.raises(ValueError, match="c: reconstruct mode needs square"):
        circulant_reconstruct_(torch.randn(3, 16), torch.randn(1, 2, 8))
    with pytest.raises(ValueError, match="x: expected last dim"):
        circulant_reconstruct_(torch.randn(3, 8), c)
    with pytest.raises(ValueError, match="x: reconstruct mode overwrites x in place"):
        circulant_reconstruct_(torch.randn(16, 3).T, c)
    with pytest.raises(ValueError, match="x: a leaf tensor that requires grad"):
        circulant_reconstruct_(torch.randn(3, 16, requires_grad=True), c)
    with pytest.raises(TypeError, match="x: expected a float32"):
        circulant_reconstruct_(torch.ones(3, 16, dtype=torch.int64), c)
    with pytest.raises(ValueError, match="bias: expected shape"):
        circulant_reconstruct_(torch.randn(3, 16), c, torch.zeros(8))
    with pytest.raises(ValueError, match="reconstruct: needs a square layer"):
        BlockCirculantLinear(32, 16, 8, reconstruct=True)
    with pytest.raises(ValueError, match="reconstruct: needs backend='rdfft'"):
        BlockCirculantLinear(16, 16, 8, backend="rfft", reconstruct=True)
    with pytest.raises(ValueError, match="reconstruct_eps"):
        BlockCirculantLinear(16, 16, 8, reconstruct=True, reconstruct_eps=0.0)
