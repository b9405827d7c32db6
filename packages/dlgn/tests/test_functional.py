"""The gate table, the relaxation and Gumbel straight-through (issue 17, item 1)."""

from __future__ import annotations

import pytest
import torch
from dlgn import gate_table, gumbel_st, relaxed_gates
from dlgn.functional import GATE_NAMES, gumbel_noise, truth_table
from dlgn.packed import packed_layer
from dlgn.reference import bernoulli_expectation, gate, gumbel_st_grad
from scipy.stats import chisquare

from neurips25_core.testing import assert_close

CORNERS = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def onehot(ids, dtype=torch.float64):
    return torch.nn.functional.one_hot(torch.as_tensor(ids), 16).to(dtype)


def test_gate_table_matches_spec_rows():
    t = gate_table(torch.float64)
    assert t.shape == (16, 4)
    # A few rows of the spec's table, written out by hand: (1, a, b, ab).
    assert t[1].tolist() == [0, 0, 0, 1]  # AND
    assert t[6].tolist() == [0, 1, 1, -2]  # XOR
    assert t[8].tolist() == [1, -1, -1, 1]  # NOR
    assert t[11].tolist() == [1, 0, -1, 1]  # B⇒A
    assert t[13].tolist() == [1, -1, 0, 1]  # A⇒B
    assert len(GATE_NAMES) == 16


@pytest.mark.parametrize("gid", range(16))
def test_truth_table_at_corners(gid):
    a, b = CORNERS[:, 0], CORNERS[:, 1]
    out = relaxed_gates(a, b, onehot([gid] * 4))
    expected = [(gid >> (3 - k)) & 1 for k in range(4)]  # id = 8 f00 + 4 f01 + 2 f10 + f11
    assert out.tolist() == expected
    assert truth_table()[gid].tolist() == expected
    assert gate(gid, a, b).tolist() == expected


@pytest.mark.parametrize("gid", range(16))
def test_relaxation_is_bernoulli_expectation_in_unit_interval(gid):
    g = torch.Generator().manual_seed(gid)
    a = torch.rand(1000, dtype=torch.float64, generator=g)
    b = torch.rand(1000, dtype=torch.float64, generator=g)
    out = relaxed_gates(a, b, onehot([gid] * 1000))
    assert_close(out, bernoulli_expectation(gid, a, b), rtol=1e-12)
    assert torch.allclose(out, gate(gid, a, b), rtol=0, atol=1e-14)
    assert (out >= 0).all() and (out <= 1).all()
    # A mixture of gates stays in [0, 1] too.
    w = torch.softmax(torch.randn(1000, 16, dtype=torch.float64, generator=g), -1)
    mix = relaxed_gates(a, b, w)
    assert (mix >= 0).all() and (mix <= 1).all()


@pytest.mark.parametrize("word_bits", [32, 64])
def test_bitwise_eval_equals_relaxation_on_binary_inputs(word_bits):
    dtype = torch.int32 if word_bits == 32 else torch.int64
    # Word bit k of input a/b = corner k; every gate as one neuron.
    a_word = torch.tensor([0b1100], dtype=dtype)
    b_word = torch.tensor([0b1010], dtype=dtype)
    words = torch.stack([a_word, b_word])  # (2 inputs, 1 word)
    ids = torch.arange(16)
    out = packed_layer(
        words, ids, torch.zeros(16, dtype=torch.long), torch.ones(16, dtype=torch.long)
    )
    a = torch.tensor([float((0b1100 >> k) & 1) for k in range(4)])
    b = torch.tensor([float((0b1010 >> k) & 1) for k in range(4)])
    for gid in range(16):
        bits = [(int(out[gid, 0]) >> k) & 1 for k in range(4)]
        relaxed = relaxed_gates(a, b, onehot([gid] * 4, torch.float32))
        assert bits == relaxed.long().tolist(), GATE_NAMES[gid]
    # The unused high bits follow the gate's f(0,0) (padding), and are ignored later.


def test_gumbel_st_forward_is_exactly_one_hot():
    z = torch.randn(500, 16, generator=torch.Generator().manual_seed(0)) * 30
    w = gumbel_st(z, 1.0, torch.Generator().manual_seed(1))
    assert ((w == 0) | (w == 1)).all()
    assert (w.sum(-1) == 1).all()
    assert w.dtype == z.dtype


def test_gumbel_st_grad_is_the_analytic_formula():
    g0 = torch.Generator().manual_seed(3)
    z = torch.randn(7, 16, dtype=torch.float64, generator=g0, requires_grad=True)
    upstream = torch.randn(7, 16, dtype=torch.float64, generator=g0)
    tau = 0.7
    w = gumbel_st(z, tau, torch.Generator().manual_seed(11))
    (w * upstream).sum().backward()
    # Recover the same noise from the same generator state.
    noise = gumbel_noise((7, 16), torch.Generator().manual_seed(11), torch.float64)
    assert torch.equal(w, onehot((z.detach() + noise).argmax(-1)))
    assert_close(z.grad, gumbel_st_grad(upstream, z.detach(), noise, tau), rtol=1e-12)


def test_gumbel_st_without_noise_is_softmax_st():
    z = torch.randn(5, 16, dtype=torch.float64, requires_grad=True)
    up = torch.randn(5, 16, dtype=torch.float64)
    w = gumbel_st(z, 2.0, noise=False)
    (w * up).sum().backward()
    assert torch.equal(w, onehot(z.detach().argmax(-1)))
    assert_close(z.grad, gumbel_st_grad(up, z.detach(), torch.zeros_like(up), 2.0), rtol=1e-12)


def test_gumbel_st_gradcheck_with_fixed_noise():
    # With the noise fixed, the backward is the exact gradient of the surrogate softmax((z+g)/τ).
    g = torch.Generator().manual_seed(5)
    z = torch.randn(3, 16, dtype=torch.float64, generator=g, requires_grad=True)
    noise = gumbel_noise((3, 16), g, torch.float64)
    up = torch.randn(3, 16, dtype=torch.float64, generator=g)
    (gumbel_st(z, 1.5, noise=noise) * up).sum().backward()
    zz = z.detach().requires_grad_(True)
    (torch.softmax((zz + noise) / 1.5, -1) * up).sum().backward()
    assert_close(z.grad, zz.grad, rtol=1e-12)


def test_gumbel_argmax_frequencies_match_softmax():
    z = torch.tensor(
        [2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2, -2.0, 0.0, 0.3, 0.1, -0.2, 0.9, 0.4, -3.0]
    )
    draws = 20_000
    w = gumbel_st(z.expand(draws, 16).contiguous(), 1.0, torch.Generator().manual_seed(2026))
    counts = w.sum(0).double()
    expected = torch.softmax(z.double(), -1) * draws
    p = chisquare(counts.numpy(), expected.numpy()).pvalue
    assert p > 1e-3, (p, counts, expected)
    # And a wrong distribution is rejected at this sample size (the test has power).
    wrong = torch.softmax(z.double() * 1.2, -1) * draws
    assert chisquare(counts.numpy(), wrong.numpy()).pvalue < 1e-3


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan")])
def test_gumbel_st_bad_tau(tau):
    with pytest.raises(ValueError, match="tau"):
        gumbel_st(torch.zeros(2, 16), tau)


def test_relaxed_gates_bad_input():
    a = torch.rand(3, 4)
    with pytest.raises(ValueError, match="w: expected shape"):
        relaxed_gates(a, a, torch.rand(4, 15))
    with pytest.raises(ValueError, match="b: expected the shape"):
        relaxed_gates(a, torch.rand(3, 5), torch.rand(4, 16))
    with pytest.raises(TypeError, match="a: expected a floating"):
        relaxed_gates(a.long(), a, torch.rand(4, 16))
