"""The MeZO step and the DiZO projection round against their float64 specification."""

from __future__ import annotations

import pytest
import torch
from dizo import DiZO, DiZOConfig, MeZO, MeZOConfig, divergence, divergence_cv, ops, reference

from neurips25_core.testing import assert_close, randn


def test_same_seed_same_z_and_restore():
    w = [randn(33, 7, seed=1), randn(5, seed=2)]
    z1 = [torch.zeros_like(t) for t in w]
    z2 = [torch.zeros_like(t) for t in w]
    ops.perturb_(z1, 11, 1.0)
    ops.perturb_(z2, 11, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(z1, z2))
    z3 = [torch.zeros_like(t) for t in w]
    ops.perturb_(z3, 12, 1.0)
    assert not torch.equal(z1[0], z3[0])
    for a, b in zip(z1, reference.direction(w, 11)):
        assert torch.equal(a, b)
    orig = [t.clone() for t in w]
    ops.perturb_(w, 11, 1e-3)
    ops.perturb_(w, 11, -2e-3)
    ops.perturb_(w, 11, 1e-3)
    err = max((a - b).abs().max().item() for a, b in zip(w, orig))
    assert 0 <= err < 1e-6  # a few ulp at unit scale, not bitwise


def test_global_rng_untouched():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    ops.perturb_([torch.zeros(10)], 3, 1.0)
    assert torch.equal(before, torch.get_rng_state())


def _quadratic(d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    h = a @ a.T + torch.eye(d, dtype=torch.float64)
    b = torch.randn(d, generator=g, dtype=torch.float64)
    return h, b


def test_mezo_update_and_estimator_float64():
    h, b = _quadratic()
    model = torch.nn.Linear(6, 1, bias=False).double()
    theta0 = model.weight.detach().clone()

    def loss_fn(m, _):
        w = m.weight.view(-1)
        return 0.5 * w @ h @ w - b @ w

    cfg = MeZOConfig(lr=1e-2, eps=1e-3, seed=3)
    opt = MeZO(model, cfg)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=torch.Generator().manual_seed(3)))
    opt.step(loss_fn, None)
    z = reference.direction([theta0], seed)[0]
    grad = h @ theta0.view(-1) - b
    assert abs(opt.last_projected_grad - float(z.view(-1) @ grad)) < 1e-10 * max(
        1, abs(float(z.view(-1) @ grad))
    )
    expected = theta0 - cfg.lr * opt.last_projected_grad * z
    assert_close(model.weight.detach(), expected, rtol=1e-12)
    new, g, _ = reference.mezo_step(
        [theta0], lambda ps: loss_fn(type("M", (), {"weight": ps[0]})(), None), seed, 1e-2, 1e-3
    )
    assert abs(g - opt.last_projected_grad) < 1e-10
    assert_close(model.weight.detach(), new[0], rtol=1e-12)


def test_weight_decay_skips_bias():
    model = torch.nn.Linear(3, 2).double()
    w0, b0 = model.weight.detach().clone(), model.bias.detach().clone()
    opt = MeZO(model, MeZOConfig(lr=0.1, weight_decay=0.5))
    opt.step(lambda m, _: torch.zeros((), dtype=torch.float64), None)  # g = 0: only decay acts
    assert_close(model.weight.detach(), w0 * (1 - 0.05), rtol=1e-12)
    assert torch.equal(model.bias.detach(), b0)


class _Blocks(torch.nn.Module):
    def __init__(self, n=4, d=32, dtype=torch.float32):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(d, d, bias=False, dtype=dtype) for _ in range(n)
        )

    def forward(self, x):
        for lin in self.layers:
            x = torch.tanh(lin(x))
        return x


def _mlp_loss(m, batch):
    x, y = batch
    return ((m(x) - y) ** 2).mean()


def _data(n=64, d=32, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    return x, torch.tanh(x @ torch.randn(d, d, generator=g, dtype=dtype) / d**0.5)


def test_projection_matches_reference_and_geometry():
    torch.manual_seed(0)
    model = _Blocks(dtype=torch.float64)
    batches = [_data(seed=s, dtype=torch.float64) for s in range(3)]
    cfg = DiZOConfig(
        lr=5e-3, interval=1000, include=r"layers\.(1|2)\.weight$", tau=0.2, proj_iters=5
    )
    opt = DiZO(model, cfg, batches)
    for _ in range(20):
        opt.step(_mlp_loss, batches[0])
    before = [p.detach().clone() for p in opt.params]
    sel_before = [p.detach().clone() for p in opt.selected]
    u_gen = torch.Generator().manual_seed(cfg.seed + 1)
    us = [torch.randn(2, generator=u_gen, dtype=torch.float64) for _ in range(cfg.proj_iters)]
    holder = _Blocks(dtype=torch.float64)
    holder.load_state_dict(model.state_dict())

    def ref_loss(k, sel):
        with torch.no_grad():
            holder.layers[1].weight.copy_(sel[0])
            holder.layers[2].weight.copy_(sel[1])
            return _mlp_loss(holder, batches[k % 3])

    want, gamma, _t = reference.projection_round(
        sel_before, opt.anchors, ref_loss, us, 0.1, 2.0, 0.2
    )
    ratios = opt.project_now(_mlp_loss)
    for got, exp in zip(opt.selected, want):
        assert_close(got.detach(), exp, rtol=1e-10)
    assert ((ratios >= 0.8 - 1e-12) & (ratios <= 1.2 + 1e-12)).all()
    for p, a, b, gm in zip(opt.selected, opt.anchors, sel_before, gamma):
        d_new, d_old = (p.detach() - a).view(-1), (b - a).view(-1)
        assert torch.nn.functional.cosine_similarity(d_new, d_old, dim=0) > 1 - 1e-12
        assert abs(d_new.norm() - gm) < 1e-10 * gm
    for i in (0, 3):
        assert torch.equal(opt.params[i].detach(), before[i])  # unselected: bitwise unchanged


def test_project_undo_restores():
    w = [randn(40, seed=1), randn(7, 3, seed=2)]
    a = [t + 0.1 * randn(*t.shape, seed=9) for t in w]
    orig = [t.clone() for t in w]
    ops.project_(w, a, [1.15, 0.85])
    ops.project_(w, a, [1 / 1.15, 1 / 0.85])
    assert max((x - y).abs().max().item() for x, y in zip(w, orig)) < 1e-6


def _train_pair(cfg_kwargs, steps=12):
    out = []
    for cls in ("mezo", "dizo"):
        torch.manual_seed(0)
        model = _Blocks()
        batches = [_data(seed=s) for s in range(4)]
        if cls == "mezo":
            opt = MeZO(model, MeZOConfig(lr=1e-2, seed=4))
        else:
            opt = DiZO(
                model,
                DiZOConfig(lr=1e-2, seed=4, include=r"layers\.\d\.weight$", **cfg_kwargs),
                batches,
            )
        for i in range(steps):
            opt.step(_mlp_loss, batches[i % 4])
        out.append([p.detach().clone() for p in model.parameters()])
    return out


def test_tau_zero_and_long_interval_equal_mezo_bitwise():
    for kw in ({"tau": 0.0, "interval": 5}, {"interval": 13}):
        mezo, dz = _train_pair(kw)
        assert all(torch.equal(a, b) for a, b in zip(mezo, dz)), kw
    mezo, dz = _train_pair({"interval": 5})
    assert not all(torch.equal(a, b) for a, b in zip(mezo, dz))


def test_gamma_moves_toward_optimum():
    # L(theta0 + s * Delta) = (s - s*)^2 with s* = 1.15 inside [0.8, 1.2]
    anchor = torch.zeros(50, dtype=torch.float64)
    delta = randn(50, seed=3, dtype=torch.float64) * 0.01
    theta = (anchor + delta).clone()
    s_star = 1.15

    def loss(k, sel):
        s = float((sel[0] - anchor).norm() / delta.norm())
        return (s - s_star) ** 2

    g = torch.Generator().manual_seed(0)
    us = [torch.randn(1, generator=g, dtype=torch.float64) for _ in range(10)]
    _, gamma, t = reference.projection_round([theta], [anchor], loss, us, 0.1, 2.0, 0.2)
    s = float(gamma[0] / t[0])
    assert abs(s - s_star) < abs(1.0 - s_star)


@pytest.mark.slow
def test_divergence_cv_mezo_flat_fo_spread():
    torch.manual_seed(0)
    model = _Blocks()
    anchor = {k: v.clone() for k, v in model.state_dict().items()}
    opt = MeZO(model, MeZOConfig(lr=1e-2, seed=0))
    data = [_data(seed=s) for s in range(4)]
    for i in range(300):
        opt.step(_mlp_loss, data[i % 4])
    cv_mezo = divergence_cv(divergence(model, anchor))
    assert cv_mezo < 0.05
    torch.manual_seed(0)
    fo = _Blocks()
    anchor = {k: v.clone() for k, v in fo.state_dict().items()}
    sgd = torch.optim.SGD(fo.parameters(), lr=0.1)
    for i in range(300):
        sgd.zero_grad()
        _mlp_loss(fo, data[i % 4]).backward()
        sgd.step()
    cv_fo = divergence_cv(divergence(fo, anchor))
    assert cv_fo > cv_mezo  # measured 0.029 vs 0.011 here (the spec quotes 1.15 for FO on its MLP)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"eps": 0.0}, "eps"),
        ({"eps": -1.0}, "eps"),
        ({"tau": 1.0}, "tau"),
        ({"tau": -0.1}, "tau"),
        ({"interval": 0}, "interval"),
    ],
)
def test_bad_config(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        DiZOConfig(lr=1e-3, **kwargs)


def test_bad_inputs():
    model = _Blocks()
    with pytest.raises(ValueError, match="include"):
        DiZO(model, DiZOConfig(lr=1e-3, include="nothing_here"), [])
    with pytest.raises(TypeError, match="floating-point"):
        ops.perturb_([torch.zeros(3, dtype=torch.int64)], 0, 1.0)
    with pytest.raises(TypeError, match="model"):
        MeZO("not a model", MeZOConfig(lr=1e-3))
    opt = MeZO(model, MeZOConfig(lr=1e-3))
    with pytest.raises(ValueError, match="loss_fn"):
        opt.step(lambda m, b: m(b[0]), _data())
    with pytest.raises(ValueError, match="seed"):
        ops.perturb_([torch.zeros(3)], -1, 1.0)
    with pytest.raises(ValueError, match="anchors"):
        ops.project_([torch.zeros(3)], [torch.zeros(4)], [1.0])
    with pytest.raises(ValueError, match="backend"):
        ops.perturb_([torch.zeros(3)], 0, 1.0, backend="cuda")


def test_state_dict_roundtrip_and_refusal():
    model = _Blocks()
    batches = [_data(seed=s) for s in range(2)]
    opt = DiZO(model, DiZOConfig(lr=1e-2, interval=3, include=r"layers\.0\.weight$"), batches)
    for _ in range(4):
        opt.step(_mlp_loss, batches[0])
    state = opt.state_dict()
    model2 = _Blocks()
    model2.load_state_dict(model.state_dict())
    opt2 = DiZO(model2, DiZOConfig(lr=1e-2, interval=3, include=r"layers\.0\.weight$"), batches)
    opt2.load_state_dict(state)
    opt.step(_mlp_loss, batches[1])
    opt2.step(_mlp_loss, batches[1])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    other = DiZO(_Blocks(), DiZOConfig(lr=1e-2, include=r"layers\.1\.weight$"), batches)
    with pytest.raises(ValueError, match="state"):
        other.load_state_dict(state)
