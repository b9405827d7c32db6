"""lope.ops against the float64 reference (lope.reference), forward and backward, outputs poisoned."""

import itertools

import pytest
import torch
from lope import ops
from lope.reference import compensate_reference, expert_mix_reference

from neurips25_core.testing import (
    FP32_RTOL,
    assert_close,
    check_forward_backward,
    randn,
)


def _gates(T, N, seed, dtype=torch.float32):
    return torch.softmax(randn(T, N, seed=seed, dtype=dtype), dim=-1)


SHAPES = list(itertools.product((1, 7, 129), (1, 33, 64), ((4, 2), (4, 3), (4, 4), (5, 4))))


@pytest.mark.parametrize(("T", "out", "Nr"), SHAPES)
def test_expert_mix_matches_reference(T, out, Nr, poisoned_buffers):
    N, r = Nr
    h = randn(T, r, seed=1).requires_grad_()
    gates = _gates(T, N, 2).requires_grad_()
    B = randn(N, out, r, seed=3).requires_grad_()
    errors = check_forward_backward(
        lambda h, g, B: ops.expert_mix(h, g, B, scaling=8.0),
        lambda h, g, B: expert_mix_reference(h, g, B, 8.0),
        [h, gates, B],
        rtol=1e-6,
        # Gradients: the project's fp32 default. The 1e-6 fails on grad_h at T=1, r=2,
        # out=33 (a 2-vector with cancellation: 1.4e-6 here, 2.4e-6 for an fp32 per-expert loop).
        grad_rtol=FP32_RTOL,
        names=["h", "gates", "B"],
    )
    assert poisoned_buffers == [(T, out)], "the output was not written into a poisoned buffer"
    assert set(errors) == {"out0", "grad_h", "grad_gates", "grad_B"}


def test_expert_mix_reference_backend_is_the_loop():
    h, g, B = randn(5, 3, seed=0), _gates(5, 4, 1), randn(4, 6, 3, seed=2)
    loop = sum(g[:, n : n + 1] * (h @ B[n].T) for n in range(4)) * 2.0
    assert_close(ops.expert_mix(h, g, B, 2.0, backend="reference"), loop, rtol=1e-6)


@pytest.mark.parametrize(
    ("N", "poison", "k", "beta"),
    [
        (4, (3,), 0, 1.0),
        (4, (3,), 1, 1.0),
        (4, (3,), 3, 1.0),
        (4, (0,), 2, 0.5),
        (5, (1, 3), 3, 2.0),
    ],
)
@pytest.mark.parametrize("T", [1, 7, 33])
def test_compensate_matches_reference(T, N, poison, k, beta):
    gates = _gates(T, N, 4).requires_grad_()
    # With k <= 1 the compensated gates do not depend on expert_out (the whole mass goes to one
    # expert, θ/θ = 1): the true gradient is 0, where a relative error measures rounding noise.
    expert_out = randn(T, N, 9, seed=5).requires_grad_(k > 1)
    check_forward_backward(
        lambda g, y: ops.compensate(g, y, poison, k, beta),
        lambda g, y: compensate_reference(g, y, poison, k, beta),
        [gates, expert_out],
        rtol=1e-6,
        names=["gates", "expert_out"],
    )


def test_compensate_invariants():
    T, N = 64, 4
    gates, y = _gates(T, N, 6), randn(T, N, 17, seed=7)
    plain = ops.compensate(gates, y, (3,), k=0)
    assert torch.equal(plain[:, :3], gates[:, :3]) and torch.all(plain[:, 3] == 0)
    full = ops.compensate(gates, y, (3,), k=N - 1, beta=1.0)
    assert_close(full.sum(-1), torch.ones(T), rtol=1e-6)
    assert torch.all(full[:, 3] == 0)
    for k, beta in itertools.product(range(N), (0.0, 0.5, 1.0, 3.0)):
        assert torch.all(ops.compensate(gates, y, (3,), k=k, beta=beta) >= 0)
    assert torch.equal(ops.compensate(gates, y, (3,), k=2, beta=0.0), plain)
    assert torch.equal(ops.compensate(gates, y, ()), gates)


def test_compensate_falls_back_to_gate_proportions_when_no_cosine_is_positive():
    gates = torch.tensor([[0.1, 0.3, 0.2, 0.4]], dtype=torch.float64)
    y = torch.tensor([[[-1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [1.0, 0.0]]], dtype=torch.float64)
    out = ops.compensate(gates, y, (3,), k=3)
    expected = torch.tensor([[0.1, 0.3, 0.2, 0.0]], dtype=torch.float64) * (1 + 0.4 / 0.6)
    assert_close(out, expected, rtol=1e-12)
    assert_close(compensate_reference(gates, y, (3,), 3, 1.0), expected, rtol=1e-12)


CASES = list(itertools.product(ops.MODES, ops.ROUTER_INPUTS, ((3,), (0, 2))))


@pytest.mark.parametrize(("mode", "router_input", "poison"), CASES)
def test_adapter_matches_reference(mode, router_input, poison):
    T, d_in, out, r, N = 13, 11, 7, 3, 5
    x = randn(T, d_in, seed=8).requires_grad_()
    A = randn(r, d_in, seed=9).requires_grad_()
    B = randn(N, out, r, seed=10).requires_grad_()
    router = randn(N, d_in if router_input == "x" else r, seed=11).requires_grad_()
    kwargs = dict(poison=poison, mode=mode, k=2, beta=1.0, router_input=router_input)
    check_forward_backward(
        lambda x, A, B, W: ops.adapter(x, A, B, W, 8.0, **kwargs),
        lambda x, A, B, W: ops.adapter(x, A, B, W, 8.0, backend="reference", **kwargs),
        [x, A, B, router],
        rtol=1e-6,
        names=["x", "A", "B", "router"],
    )


def test_inference_is_a_loop_over_compensated_normal_experts():
    T, d_in, out, r, N = 9, 6, 5, 2, 4
    f64 = torch.float64
    x, A = randn(T, d_in, seed=12, dtype=f64), randn(r, d_in, seed=13, dtype=f64)
    B, W = randn(N, out, r, seed=14, dtype=f64), randn(N, d_in, seed=15, dtype=f64)
    got = ops.adapter(x, A, B, W, 2.0, poison=(3,), mode="inference", k=3)
    h = x @ A.T
    gates = torch.softmax(x @ W.T, -1)
    outs = torch.stack([h @ B[n].T for n in range(N)], 1)
    new = compensate_reference(gates, outs, (3,), 3, 1.0)
    loop = sum(new[:, n : n + 1] * (h @ B[n].T) for n in range(3)) * 2.0
    assert_close(got, loop, rtol=1e-12)
    unmasked = ops.adapter(x, A, B, W, 2.0, poison=(3,), mode="stage2")
    assert (got - unmasked).abs().max() > 1e-3, "masking must change the output"


def test_zero_B_adds_exactly_zero():
    x, A, W = randn(7, 10, seed=16), randn(4, 10, seed=17), randn(4, 10, seed=18)
    B = torch.zeros(4, 8, 4)
    for mode in ops.MODES:
        assert torch.equal(ops.adapter(x, A, B, W, 8.0, poison=(3,), mode=mode), torch.zeros(7, 8))


def test_one_expert_without_poison_is_lora():
    x, A, B = randn(7, 10, seed=19), randn(4, 10, seed=20), randn(1, 6, 4, seed=21)
    W = randn(1, 10, seed=22)
    lora = 8.0 * (x @ A.T) @ B[0].T
    assert_close(ops.adapter(x, A, B, W, 8.0), lora, rtol=1e-6)


def test_route_is_float32_softmax():
    x, W = randn(5, 3, seed=23, dtype=torch.bfloat16), randn(4, 3, seed=24, dtype=torch.bfloat16)
    gates = ops.route(x, W)
    assert gates.dtype == torch.float32
    assert_close(gates.sum(-1), torch.ones(5), rtol=1e-6)
