"""The references agree with each other and define the gradient semantics (float64)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tfla.reference import mlstm_parallel, mlstm_recurrent

from neurips25_core.testing import assert_close, check_forward_backward, randn

F64 = torch.float64
VARIANTS = [("exp", True), ("sig", True), ("sig", False)]


@pytest.mark.parametrize(("variant", "normalize"), VARIANTS)
@pytest.mark.parametrize(("S", "Dk", "Dv"), [(23, 8, 12), (40, 16, 16)])
def test_recurrent_equals_parallel_at_eps0(make_inputs, variant, normalize, S, Dk, Dv):
    xs = make_inputs(2, 2, S, Dk, Dv, dtype=F64, i_scale=2.0, f_scale=2.0)
    kw = dict(variant=variant, normalize=normalize, eps=0.0)
    errs = check_forward_backward(
        lambda *a: mlstm_parallel(*a, **kw), lambda *a: mlstm_recurrent(*a, **kw), xs, names="qkvif"
    )
    assert max(errs.values()) <= 1e-10


def test_forms_differ_only_through_eps(make_inputs):
    """The recurrent m includes m_0 = 0, the parallel one does not: they differ only via eps·e^m."""
    xs = make_inputs(1, 2, 30, 8, 8, dtype=F64, i_shift=-3.0, f_shift=-1.0)
    r = mlstm_recurrent(*xs, eps=1e-6)
    p = mlstm_parallel(*xs, eps=1e-6)
    err = (r - p).norm() / r.norm()
    assert 0 < err < 1e-5
    assert_close(
        mlstm_parallel(*xs, variant="sig", eps=1e-6), mlstm_recurrent(*xs, variant="sig", eps=1e-6)
    )


def _unstabilised(q, k, v, i, f, c0, n0, m0, variant):
    """The mLSTM without any stabiliser at eps = 0 (true states): the exact function of the inputs."""
    _B, _H, S, Dk = q.shape
    C, n = torch.exp(m0)[..., None] * c0, torch.exp(m0) * n0
    hs = []
    for t in range(S):
        fg = torch.sigmoid(f[:, :, t, None])
        ig = torch.exp(i[:, :, t, None]) if variant == "exp" else torch.sigmoid(i[:, :, t, None])
        C = fg[..., None] * C + ig[..., None] * k[:, :, t, :, None] * v[:, :, t, None, :]
        n = fg * n + ig * k[:, :, t]
        qt = q[:, :, t] / math.sqrt(Dk)
        den = torch.maximum((n * qt).sum(-1, keepdim=True).abs(), torch.ones_like(n[..., :1]))
        hs.append(torch.einsum("bhd,bhde->bhe", qt, C) / den)
    return torch.stack(hs, 2)


@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_detached_stabiliser_gives_the_exact_gradient_at_eps0(make_inputs, variant):
    q, k, v, i, f, c0, n0, m0 = make_inputs(1, 2, 17, 8, 6, dtype=F64, states=True)
    if variant == "sig":
        m0 = torch.zeros_like(m0)

    def stabilised(q, k, v, i, f, c0, n0, m0):
        return mlstm_recurrent(q, k, v, i, f, variant=variant, c0=c0, n0=n0, m0=m0, eps=0.0)

    def exact(q, k, v, i, f, c0, n0, m0):
        return _unstabilised(q, k, v, i, f, c0, n0, m0, variant)

    check_forward_backward(
        stabilised,
        exact,
        [q, k, v, i, f, c0, n0, m0],
        names=["q", "k", "v", "i", "f", "c0", "n0", "m0"],
    )


@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_gate_and_state_gradient_identities(make_inputs, variant):
    q, k, v, i, f, c0, n0, m0 = make_inputs(2, 2, 19, 8, 5, dtype=F64, states=True)
    m0_ = m0 if variant == "exp" else None
    h, (C, n, _) = mlstm_recurrent(
        q, k, v, i, f, variant=variant, c0=c0, n0=n0, m0=m0_, return_last_state=True
    )
    gh, gC, gn = (
        randn(*h.shape, seed=1, dtype=F64),
        randn(*C.shape, seed=2, dtype=F64),
        randn(*n.shape, seed=3, dtype=F64),
    )
    loss = (h * gh).sum() + (C * gC).sum() + (n * gn).sum()
    ins = [q, k, i, f, c0, n0] + ([m0] if variant == "exp" else [])
    dq, dk, di, df, dc0, dn0, *dm0 = torch.autograd.grad(loss, ins)
    kdk = (k * dk).sum(-1)
    assert_close(di, kdk if variant == "exp" else kdk * torch.sigmoid(-i), name="di = k·dk")
    dF = (q * dq).sum(-1) - kdk
    dF[..., -1] += (gC * C).sum((-1, -2)) + (gn * n).sum(-1)
    dlf = dF.flip(-1).cumsum(-1).flip(-1)
    assert_close(df, torch.sigmoid(-f) * dlf, name="df = σ(-f)·revcumsum(q·dq - k·dk)")
    if variant == "exp":
        assert_close(dm0[0], ((dc0 * c0).sum((-1, -2)) + (dn0 * n0).sum(-1))[..., None], name="dm0")


@pytest.mark.parametrize(("variant", "normalize"), [("exp", True), ("sig", True)])
def test_detach_denominator_changes_dq_not_dv(make_inputs, variant, normalize):
    xs = make_inputs(1, 2, 21, 8, 8, dtype=F64)
    g = randn(1, 2, 21, 8, seed=9, dtype=F64)
    grads = []
    for detach in (False, True):
        h = mlstm_recurrent(*xs, variant=variant, normalize=normalize, detach_denominator=detach)
        grads.append(torch.autograd.grad((h * g).sum(), xs))
    assert_close(grads[1][2], grads[0][2], name="dv")
    assert (grads[1][0] - grads[0][0]).norm() > 1e-3 * grads[0][0].norm(), (
        "dq must differ between the modes"
    )


def test_parallel_detached_matches_recurrent_detached(make_inputs):
    xs = make_inputs(1, 3, 26, 8, 4, dtype=F64)
    kw = dict(eps=0.0, detach_denominator=True)
    check_forward_backward(
        lambda *a: mlstm_parallel(*a, **kw), lambda *a: mlstm_recurrent(*a, **kw), xs, names="qkvif"
    )


def test_sig_unnormalised_is_gated_linear_attention(make_inputs):
    q, k, v, i, f = make_inputs(1, 1, 9, 4, 3, dtype=F64, requires_grad=False)
    h = mlstm_parallel(q, k, v, i, f, variant="sig", normalize=False)
    lf, li = F.logsigmoid(f[0, 0]), F.logsigmoid(i[0, 0])
    out = torch.zeros(9, 3, dtype=F64)
    for t in range(9):
        for s in range(t + 1):
            w = torch.exp(lf[s + 1 : t + 1].sum() + li[s])
            out[t] += w * (q[0, 0, t] @ k[0, 0, s]) / 2.0 * v[0, 0, s]
    assert_close(h[0, 0], out)
