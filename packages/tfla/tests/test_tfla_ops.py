"""The public op: dispatch, dtypes, detach_denominator and argument checks."""

from __future__ import annotations

import pytest
import tfla
import torch
from tfla.ops import _exact_last_state
from tfla.reference import mlstm_recurrent

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, check_forward_backward


def test_auto_on_cpu_is_the_torch_path(make_inputs):
    xs = make_inputs(1, 2, 30, 8, 8, requires_grad=False)
    from tfla.chunkwise import mlstm_chunkwise

    assert torch.equal(tfla.mlstm(*xs, chunk_size=16), mlstm_chunkwise(*xs, chunk_size=16))


@pytest.mark.parametrize("backend", ["torch", "reference", "triton"])
@pytest.mark.parametrize("detach", [False, True])
def test_backends_match_reference_with_states(make_inputs, backend, detach):
    if backend == "triton" and not triton_usable():
        pytest.skip("needs triton with a GPU or TRITON_INTERPRET=1")
    xs = make_inputs(1, 2, 35, 16, 16, states=True)
    names = ["q", "k", "v", "i", "f", "c0", "n0", "m0"]

    def fn(q, k, v, i, f, c0, n0, m0):
        return tfla.mlstm(
            q,
            k,
            v,
            i,
            f,
            chunk_size=16,
            c0=c0,
            n0=n0,
            m0=m0,
            return_last_state=True,
            detach_denominator=detach,
            backend=backend,
        )

    def ref(q, k, v, i, f, c0, n0, m0):
        # The float64 recurrence, with the exact gradient through the returned m (the wrapper
        # every backend gets; it is checked against finite differences below).
        h, state = mlstm_recurrent(
            q, k, v, i, f, c0=c0, n0=n0, m0=m0, return_last_state=True, detach_denominator=detach
        )
        return h, _exact_last_state(i, f, m0, state)

    check_forward_backward(fn, ref, xs, rtol=1e-5, names=names)


def test_detach_denominator_semantics(make_inputs):
    """dv agrees between the modes, dq does not; the detached mode equals autograd with d detached."""
    xs = make_inputs(1, 2, 40, 8, 8)
    g = torch.randn(1, 2, 40, 8, generator=torch.Generator().manual_seed(0))
    exact = torch.autograd.grad((tfla.mlstm(*xs, chunk_size=16) * g).sum(), xs)
    official = torch.autograd.grad(
        (tfla.mlstm(*xs, chunk_size=16, detach_denominator=True) * g).sum(), xs
    )
    assert_close(official[2], exact[2], name="dv")
    assert (official[0] - exact[0]).norm() > 1e-3 * exact[0].norm()


@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_modes_nearly_agree_under_a_per_head_norm(make_inputs, variant):
    """A per-head LayerNorm removes the positive per-(t, head) scale the denominator applies, so the
    detached-denominator gradient nearly equals the exact one (measured ~1e-4 at S=256, D=64)."""
    xs = make_inputs(1, 2, 64, 16, 16, dtype=torch.float64)
    offset = torch.linspace(-1, 1, 16, dtype=torch.float64)

    def loss(detach):
        h = tfla.mlstm(*xs, variant=variant, chunk_size=16, detach_denominator=detach)
        return ((torch.nn.functional.layer_norm(h, (16,)) + offset) ** 2).sum()

    exact = torch.autograd.grad(loss(False), xs)
    official = torch.autograd.grad(loss(True), xs)
    for name, a, b in zip("qkvif", official, exact):
        assert_close(a, b, rtol=1e-3, name=f"d{name}")


def test_state_dtypes(make_inputs):
    xs = make_inputs(1, 1, 20, 16, 16, dtype=torch.bfloat16, requires_grad=False)
    h, (C, n, m) = tfla.mlstm(*xs, chunk_size=16, return_last_state=True)
    assert h.dtype == torch.bfloat16 and (C.dtype, n.dtype, m.dtype) == (torch.float32,) * 3
    assert (C.shape, n.shape, m.shape) == ((1, 1, 16, 16), (1, 1, 16), (1, 1, 1))
    h, (C, n, m) = tfla.mlstm(
        *xs, variant="sig", normalize=False, chunk_size=16, return_last_state=True
    )
    assert torch.count_nonzero(m) == 0
    xs64 = [x.double() for x in xs]
    _, (C, _, _) = tfla.mlstm(*xs64, chunk_size=16, return_last_state=True, backend="reference")
    assert C.dtype == torch.float64


def _good():
    B, H, S, D = 1, 2, 8, 4
    return dict(
        q=torch.randn(B, H, S, D),
        k=torch.randn(B, H, S, D),
        v=torch.randn(B, H, S, 3),
        i=torch.randn(B, H, S),
        f=torch.randn(B, H, S),
    )


BAD = [
    (dict(q=torch.randn(1, 2, 8)), ValueError, "q: expected 4 dimensions"),
    (dict(q=torch.randint(0, 3, (1, 2, 8, 4))), TypeError, "q: expected a floating dtype"),
    (dict(q=[1.0]), TypeError, "q: expected a torch.Tensor"),
    (dict(k=torch.randn(1, 2, 8, 5)), ValueError, "k: expected the shape of q"),
    (dict(v=torch.randn(1, 2, 7, 3)), ValueError, "v: expected shape"),
    (dict(i=torch.randn(1, 2, 9)), ValueError, "i: expected shape"),
    (dict(f=torch.randn(1, 8)), ValueError, "f: expected 3 dimensions"),
    (dict(v=torch.randn(1, 2, 8, 3, dtype=torch.float64)), TypeError, "v: expected the dtype of q"),
    (dict(variant="tanh"), ValueError, "variant: expected one of"),
    (dict(variant="exp", normalize=False), ValueError, "normalize: False is only defined"),
    (dict(chunk_size=24), ValueError, "chunk_size: expected a power of two >= 16"),
    (dict(chunk_size=8), ValueError, "chunk_size: expected a power of two >= 16"),
    (dict(chunk_size=16.0), TypeError, "chunk_size: expected an int"),
    (dict(eps=-1.0), ValueError, "eps: expected a finite float >= 0"),
    (dict(eps=float("inf")), ValueError, "eps: expected a finite float >= 0"),
    (dict(eps=float("nan")), ValueError, "eps: expected a finite float >= 0"),
    (dict(qk_scale=0.0), ValueError, "qk_scale: expected None or a finite float > 0"),
    (dict(qk_scale=float("inf")), ValueError, "qk_scale: expected None or a finite float > 0"),
    (dict(i=torch.randn(1, 2, 8, dtype=torch.float64)), TypeError, "i: expected the dtype of q"),
    (dict(f=torch.randn(1, 2, 8).half()), TypeError, "f: expected the dtype of q"),
    (
        dict(c0=torch.randn(1, 2, 4, 3, dtype=torch.float64)),
        TypeError,
        r"c0: expected the dtype of q \(torch.float32\) or the state dtype",
    ),
    (dict(n0=torch.randn(1, 2, 4).half()), TypeError, "n0: expected the dtype of q"),
    (dict(m0=torch.zeros(1, 2, 1, dtype=torch.float64)), TypeError, "m0: expected the dtype of q"),
    (dict(c0=torch.randn(1, 2, 4, 4)), ValueError, r"c0: expected shape \(1, 2, 4, 3\)"),
    (dict(n0=torch.randn(1, 2, 3)), ValueError, r"n0: expected shape \(1, 2, 4\)"),
    (dict(m0=torch.randn(1, 2)), ValueError, "m0: expected 3 dimensions"),
    (dict(variant="sig", m0=torch.ones(1, 2, 1)), ValueError, "m0: mLSTMsig has no stabiliser"),
    (dict(backend="cuda"), ValueError, "backend: expected one of"),
    (dict(normalize=1), TypeError, "normalize: expected a bool"),
]


@pytest.mark.parametrize(("change", "exc", "match"), BAD)
def test_bad_arguments_raise(change, exc, match):
    args = _good()
    before = {k: v.clone() for k, v in args.items()}
    kwargs = {k: change.pop(k) for k in list(change) if k not in args}
    args.update(change)
    with pytest.raises(exc, match=match):
        tfla.mlstm(args["q"], args["k"], args["v"], args["i"], args["f"], **kwargs)
    for k, v in before.items():
        if k not in change:
            assert torch.equal(args[k], v), f"{k} was modified"


def test_triton_on_cpu_without_interpreter_raises(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    a = _good()
    with pytest.raises(ValueError, match="backend: 'triton' needs CUDA tensors"):
        tfla.mlstm(a["q"], a["k"], a["v"], a["i"], a["f"], backend="triton")


def test_triton_rejects_float64():
    a = {k: v.double() for k, v in _good().items()}
    with pytest.raises(TypeError, match="float64"):
        tfla.mlstm(a["q"], a["k"], a["v"], a["i"], a["f"], backend="triton")


# ----------------------------------------------------------------------------- issue 12, item 3


def _check_directional(loss, xs, grads, names, eps=1e-6, rtol=1e-6):
    """Central finite differences of ``loss`` along one random direction per input, and along all
    inputs at once, against the autograd gradient (float64)."""
    g = torch.Generator().manual_seed(123)
    dirs = [torch.randn(x.shape, generator=g, dtype=x.dtype) for x in xs]

    def along(which):
        plus = [
            x.detach() + (eps * u if j in which else 0) for j, (x, u) in enumerate(zip(xs, dirs))
        ]
        minus = [
            x.detach() - (eps * u if j in which else 0) for j, (x, u) in enumerate(zip(xs, dirs))
        ]
        with torch.no_grad():
            fd = float((loss(*plus) - loss(*minus)) / (2 * eps))
        ad = sum(float((grads[j] * dirs[j]).sum()) for j in which if grads[j] is not None)
        return fd, ad

    for j, name in enumerate(names):
        fd, ad = along({j})
        assert abs(ad - fd) <= rtol * max(abs(fd), 1e-3), (
            f"d{name}: autograd {ad:.9g} vs FD {fd:.9g}"
        )
    fd, ad = along(set(range(len(xs))))
    assert abs(ad - fd) <= rtol * abs(fd), f"all inputs: autograd {ad:.9g} vs FD {fd:.9g}"


@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_gradient_through_the_returned_state_matches_finite_differences(backend, eps):
    """A loss on (C, n, m) alone: before the fix, df was 4-5x off (m treated as a constant)."""
    torch.manual_seed(0)
    B, H, S, D = 1, 1, 21, 4
    dt = torch.float64
    q, k, v = (torch.randn(B, H, S, D, dtype=dt) for _ in range(3))
    i = 2 * torch.randn(B, H, S, dtype=dt)
    f = torch.randn(B, H, S, dtype=dt)
    c0, n0 = torch.randn(B, H, D, D, dtype=dt), torch.randn(B, H, D, dtype=dt)
    m0 = torch.randn(B, H, 1, dtype=dt)
    w = [
        torch.randn(B, H, D, D, dtype=dt),
        torch.randn(B, H, D, dtype=dt),
        torch.randn(1, dtype=dt),
    ]

    def loss(q, k, v, i, f, c0, n0, m0):
        _, (C, n, m) = tfla.mlstm(
            q, k, v, i, f, c0=c0, n0=n0, m0=m0, chunk_size=16, eps=eps,
            return_last_state=True, backend=backend,
        )  # fmt: skip
        return (C * w[0]).sum() + (n * w[1]).sum() + (m * w[2]).sum()

    xs = [x.requires_grad_() for x in (q, k, v, i, f, c0, n0, m0)]
    grads = torch.autograd.grad(loss(*xs), xs, allow_unused=True)
    assert grads[0] is None  # the last state does not depend on q
    _check_directional(loss, xs, grads, ["q", "k", "v", "i", "f", "c0", "n0", "m0"])


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_gradient_of_h_and_state_matches_finite_differences_at_eps_0(backend):
    """At eps = 0 the whole gradient (h and the last state together) is exact."""
    torch.manual_seed(1)
    B, H, S, D = 1, 2, 37, 5
    dt = torch.float64
    xs = [torch.randn(B, H, S, D, dtype=dt) for _ in range(3)]
    xs += [torch.randn(B, H, S, dtype=dt), torch.randn(B, H, S, dtype=dt) + 1]
    wh = torch.randn(B, H, S, D, dtype=dt)
    wc, wm = torch.randn(B, H, D, D, dtype=dt), torch.randn(B, H, 1, dtype=dt)

    def loss(q, k, v, i, f):
        h, (C, _n, m) = tfla.mlstm(
            q, k, v, i, f, chunk_size=16, eps=0.0, return_last_state=True, backend=backend
        )
        return (h * wh).sum() + (C * wc).sum() + (m * wm).sum()

    xs = [x.requires_grad_() for x in xs]
    grads = torch.autograd.grad(loss(*xs), xs)
    _check_directional(loss, xs, grads, ["q", "k", "v", "i", "f"])


def test_the_state_gradient_fix_leaves_values_and_h_gradients_unchanged(make_inputs):
    q, k, v, i, f, c0, n0, m0 = make_inputs(1, 2, 40, 8, 8, dtype=torch.float64, states=True)
    from tfla.chunkwise import mlstm_chunkwise

    h, (C, n, m) = tfla.mlstm(q, k, v, i, f, c0=c0, n0=n0, m0=m0, chunk_size=16,
                              return_last_state=True, backend="torch")  # fmt: skip
    h2, (C2, n2, m2) = mlstm_chunkwise(q, k, v, i, f, c0=c0, n0=n0, m0=m0, chunk_size=16,
                                       return_last_state=True)  # fmt: skip
    for a, b in ((h, h2), (C, C2), (n, n2), (m, m2)):
        assert torch.equal(a, b)
    g = torch.randn_like(h)
    xs = [q, k, v, i, f]
    assert all(
        torch.equal(a, b)
        for a, b in zip(torch.autograd.grad(h, xs, g), torch.autograd.grad(h2, xs, g))
    )


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_qk_scale_is_a_query_scale(make_inputs, backend):
    q, k, v, i, f = make_inputs(1, 2, 37, 16, 8, dtype=torch.float64)
    default = tfla.mlstm(q, k, v, i, f, chunk_size=16, backend=backend)
    explicit = tfla.mlstm(q, k, v, i, f, chunk_size=16, backend=backend, qk_scale=0.25)
    assert torch.equal(default, explicit)  # 1/sqrt(16)
    scaled = tfla.mlstm(q, k, v, i, f, chunk_size=16, backend=backend, qk_scale=0.1)
    ref = tfla.mlstm(q * 0.4, k, v, i, f, chunk_size=16, backend="reference")
    assert_close(scaled, ref, rtol=1e-10)
    assert not torch.allclose(scaled, default)


def test_states_in_the_dtype_of_q_or_the_state_dtype_are_accepted(make_inputs):
    xs = make_inputs(1, 1, 20, 16, 16, dtype=torch.bfloat16, requires_grad=False)
    _, state = tfla.mlstm(*xs, chunk_size=16, return_last_state=True)
    tfla.mlstm(*xs, chunk_size=16, c0=state[0], n0=state[1], m0=state[2])  # float32 states
    tfla.mlstm(*xs, chunk_size=16, c0=state[0].bfloat16(), n0=state[1].bfloat16())


def test_qk_scale_on_the_triton_path(make_inputs):
    if not triton_usable():
        pytest.skip("needs triton with a GPU or TRITON_INTERPRET=1")
    xs = make_inputs(1, 1, 20, 16, 8, seed=3)
    h = tfla.mlstm(*xs, chunk_size=16, qk_scale=0.1, backend="triton")
    x64 = [x.detach().double().requires_grad_() for x in xs]
    ref = tfla.mlstm(*x64, chunk_size=16, qk_scale=0.1, backend="reference")
    assert_close(h, ref, rtol=1e-5)
    g = torch.randn_like(h)
    for a, b in zip(torch.autograd.grad(h, xs, g), torch.autograd.grad(ref, x64, g.double())):
        assert_close(a, b, rtol=1e-5)
