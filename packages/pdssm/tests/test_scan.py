"""pd_scan: every backend against the float64 reference, forward and backward."""

from __future__ import annotations

import pytest
import torch
from pdssm import pd_scan
from pdssm.reference import combine, dense_scan, sequential_scan, transition_matrices

from neurips25_core.testing import assert_close, check_forward_backward, randn

SHAPES = [(1, 1, 1), (2, 7, 3), (3, 33, 5), (2, 64, 9), (1, 100, 16)]
ORIENTATIONS = ["column", "row"]


@pytest.mark.parametrize("orientation", ORIENTATIONS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_x0", [True, False])
def test_backends_agree_float64(pd_inputs, shape, orientation, with_x0):
    p, d, b, x0 = pd_inputs(*shape, seed=sum(shape), x0=with_x0)
    start = (
        x0
        if with_x0
        else torch.nn.functional.one_hot(torch.zeros(shape[0], dtype=torch.long), shape[2]).to(
            d.dtype
        )
    )
    ref = sequential_scan(p, d, b, start, orientation)
    for backend in ("sequential", "reference", "torch", "dense"):
        out = pd_scan(p, d, b, x0, orientation=orientation, backend=backend)
        assert_close(out, ref, rtol=1e-12, name=f"{backend} states")


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_dense_matches_dense_matrices(pd_inputs, orientation):
    """The index form and the materialised N×N form describe the same linear maps."""
    p, d, _, _ = pd_inputs(2, 5, 6, seed=3)
    a = transition_matrices(p, d, orientation)
    x = randn(2, 5, 6, seed=9, dtype=torch.complex128)
    from pdssm.reference import apply_transition

    direct = apply_transition(p, d, x, orientation)
    assert_close(torch.einsum("blmn,bln->blm", a, x), direct, rtol=1e-14)
    # column: every column has exactly one nonzero; row: every row has exactly one nonzero.
    nonzero = (a != 0).sum(dim=-2 if orientation == "column" else -1)
    assert bool((nonzero == 1).all())


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_combine_is_associative_and_composes(pd_inputs, orientation):
    p, d, b, _ = pd_inputs(4, 3, 7, seed=11)
    e = [(p[:, i], d[:, i], b[:, i]) for i in range(3)]
    left = combine(combine(e[0], e[1], orientation), e[2], orientation)
    right = combine(e[0], combine(e[1], e[2], orientation), orientation)
    for a, c in zip(left, right):
        if a.is_complex():
            assert_close(a, c, rtol=1e-14)
        else:
            assert torch.equal(a, c)
    # The composed map applied to x equals applying the three maps in order.
    x = randn(4, 7, seed=5, dtype=torch.complex128)
    seq = sequential_scan(p, d, b, x, orientation)[:, -1]
    from pdssm.reference import apply_transition

    assert_close(apply_transition(left[0], left[1], x, orientation) + left[2], seq, rtol=1e-14)


@pytest.mark.parametrize("backend", ["sequential", "torch"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
@pytest.mark.parametrize("shape", [(2, 7, 3), (3, 33, 5), (1, 64, 9)])
def test_custom_backward_equals_dense_autograd(pd_inputs, backend, orientation, shape):
    p, d, b, x0 = pd_inputs(*shape, seed=shape[1])
    d.requires_grad_()
    b.requires_grad_()
    x0.requires_grad_()
    errors = check_forward_backward(
        lambda d_, b_, x_: pd_scan(p, d_, b_, x_, orientation, backend),
        lambda d_, b_, x_: pd_scan(p, d_, b_, x_, orientation, "dense"),
        [d, b, x0],
        rtol=1e-10,
        names=["d", "b", "x0"],
    )
    assert set(errors) == {"out0", "grad_d", "grad_b", "grad_x0"}


@pytest.mark.parametrize("backend", ["sequential", "torch"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_gradcheck_complex128(pd_inputs, backend, orientation):
    p, d, b, x0 = pd_inputs(2, 5, 3, seed=4)
    inputs = tuple(t.clone().requires_grad_() for t in (d, b, x0))
    assert torch.autograd.gradcheck(
        lambda d_, b_, x_: pd_scan(p, d_, b_, x_, orientation, backend), inputs
    )


@pytest.mark.parametrize("backend", ["sequential", "torch"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_float32_paths_match_float64_reference(pd_inputs, backend, orientation):
    p, d, b, x0 = pd_inputs(3, 45, 11, seed=2, dtype=torch.complex64)
    for t in (d, b, x0):
        t.requires_grad_()
    check_forward_backward(
        lambda d_, b_, x_: pd_scan(p, d_, b_, x_, orientation, backend),
        lambda d_, b_, x_: sequential_scan(p, d_, b_, x_, orientation),
        [d, b, x0],
        names=["d", "b", "x0"],
    )


@pytest.mark.parametrize("backend", ["sequential", "torch", "dense"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_straight_through_gradient(pd_inputs, backend, orientation):
    """∂L/∂M through pd_scan(P_st) equals autograd on the dense (hard − soft).detach() + soft model."""
    batch, length, size = 2, 9, 5
    _, d, b, x0 = pd_inputs(batch, length, size, seed=21)
    logits = randn(batch, length, size, size, seed=22, dtype=torch.float64, scale=2.0)
    axis = -2 if orientation == "column" else -1
    upstream = randn(batch, length, size, seed=23, dtype=torch.complex128)

    def straight_through(m):
        soft = torch.softmax(m, dim=axis)
        hard = torch.nn.functional.one_hot(soft.argmax(axis), size).to(soft.dtype)
        hard = hard.transpose(-1, -2) if orientation == "column" else hard
        return (hard - soft).detach() + soft

    m_ref = logits.clone().requires_grad_()
    d_ref = d.clone().requires_grad_()
    p_ref = straight_through(m_ref)
    a = p_ref.to(d.dtype) * (
        d_ref.unsqueeze(-2) if orientation == "column" else d_ref.unsqueeze(-1)
    )
    x_ref = dense_scan(a, b, x0)
    grad_m_ref, grad_d_ref = torch.autograd.grad(
        (x_ref * upstream.conj()).real.sum(), [m_ref, d_ref]
    )

    m = logits.clone().requires_grad_()
    d_ours = d.clone().requires_grad_()
    x = pd_scan(straight_through(m), d_ours, b, x0, orientation, backend)
    grad_m, grad_d = torch.autograd.grad((x * upstream.conj()).real.sum(), [m, d_ours])
    assert_close(x, x_ref, rtol=1e-12, name="states")
    assert_close(grad_m, grad_m_ref, rtol=1e-10, name="grad of M")
    assert_close(grad_d, grad_d_ref, rtol=1e-10, name="grad of d")


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_bibo_bound_long_input(orientation):
    """|d| ≤ ρ < 1 keeps ‖x_t‖₁ ≤ ‖x_0‖₁ρ^t + sup‖b‖₁/(1 − ρ) over 10⁴ steps."""
    length, size, rho = 10_000, 8, 0.95
    g = torch.Generator().manual_seed(0)
    p = torch.randint(0, size, (1, length, size), generator=g)
    d = torch.polar(
        rho * torch.rand(1, length, size, generator=g, dtype=torch.float64),
        7 * torch.rand(1, length, size, generator=g, dtype=torch.float64),
    )
    d[:, ::3] = rho  # some steps at the bound itself
    b = torch.randn(1, length, size, generator=g, dtype=torch.complex128)
    x = pd_scan(p, d, b, orientation=orientation, backend="sequential")
    bound = 1.0 + b.abs().sum(-1).max().item() / (1 - rho) if orientation == "column" else None
    norms = x.abs().sum(-1) if orientation == "column" else x.abs().amax(-1)
    if orientation == "row":
        # Row one-hot: ‖PDx‖_∞ ≤ ρ‖x‖_∞ instead.
        bound = 1.0 + b.abs().amax().item() / (1 - rho)
    assert torch.isfinite(norms).all()
    assert norms.max().item() <= bound
    # ...and it does not decay to nothing either: the input keeps it alive.
    assert norms[0, -100:].min().item() > 0.1


def test_exact_fsa_with_resets():
    """Hand-set p for a DFA with a reset (a merge), d = 1, b = 0, x0 = e_q0: x_t is one-hot on the DFA state."""
    # States {0, 1, 2}; a: q → q + 1 mod 3; b: swap 0 ↔ 1; r: every state → 0 (not a permutation).
    delta = {0: [1, 2, 0], 1: [1, 0, 2], 2: [0, 0, 0]}
    g = torch.Generator().manual_seed(3)
    words = torch.randint(0, 3, (16, 200), generator=g)
    p = torch.stack([torch.tensor(delta[int(c)]) for c in words.flatten()]).view(16, 200, 3)
    d = torch.ones(16, 200, 3, dtype=torch.complex128)
    b = torch.zeros_like(d)
    states = pd_scan(p, d, b, orientation="column", backend="torch")
    q = torch.zeros(16, dtype=torch.long)
    truth = []
    for t in range(200):
        q = torch.tensor([delta[int(c)][int(s)] for c, s in zip(words[:, t], q)])
        truth.append(q)
    truth = torch.stack(truth, 1)
    onehot = torch.nn.functional.one_hot(truth, 3).to(states.dtype)
    assert torch.equal(states, onehot)
    # A linear readout (the identity on Re x) recovers the state: 100 % accuracy.
    assert bool((states.real.argmax(-1) == truth).all())
