"""apply_timescale / decay_exempt: AdamW semantics, per-group LRs, bad input, DDP global batch."""

import math

import pytest
import torch
from hpscaling import apply_timescale, decay_exempt, global_batch, timescale
from torch import nn

from neurips25_core.distributed import run_distributed


@pytest.mark.parametrize("eta_lam", [1e-3, 2.5e-4])
def test_adamw_with_zero_gradients_is_an_ema_with_timescale_tau(eta_lam):
    """θ_S = θ₀(1 − ηλ)^S exactly, and ≈ θ₀·exp(−1/τ) to 1e-3 for ηλ ≤ 1e-3."""
    eta, tau, B = 1e-3, 1.0, 256.0
    steps = round(1 / (eta_lam * tau))
    D = steps * B
    theta0 = torch.randn(7, 5, dtype=torch.float64)
    p = nn.Parameter(theta0.clone())
    opt = torch.optim.AdamW([p], lr=eta, weight_decay=0.0)
    (lam,) = apply_timescale(opt, tau, B=B, D=D)
    assert lam == pytest.approx(eta_lam / eta, rel=1e-12)
    assert timescale(B, eta, lam, D) == pytest.approx(tau, rel=1e-12)
    for _ in range(steps):
        p.grad = torch.zeros_like(p)
        opt.step()
    exact = theta0 * (1 - eta * lam) ** steps
    assert torch.allclose(p.detach(), exact, rtol=1e-10, atol=0)
    ema = theta0 * math.exp(-1 / tau)
    assert ((p.detach() - ema).norm() / ema.norm()).item() < 1e-3


def test_per_group_learning_rates_get_the_same_timescale():
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))
    groups = [
        {"params": [model[0].weight], "lr": 1e-2},
        {"params": [model[2].weight], "lr": 2.5e-3},  # a μP hidden/output LR
        {
            "params": [model[0].bias, model[1].weight, model[1].bias, model[2].bias],
            "weight_decay": 0.0,
            "hpscaling_exempt": True,
        },
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3, weight_decay=0.1)
    wd = apply_timescale(opt, 0.25, B=4096, D=1e7)
    assert wd[2] == 0.0
    for g, lam in zip(opt.param_groups[:2], wd[:2], strict=True):
        assert g["lr"] * lam == pytest.approx(4096 / (0.25 * 1e7), rel=1e-12)
    base = apply_timescale(opt, 0.25, B=4096, D=1e7, base_lr=1e-2)
    assert base[0] == base[1] == pytest.approx(4096 / (1e-2 * 0.25 * 1e7))
    indep = apply_timescale(opt, 0.25, B=4096, D=1e7, decay="independent")
    assert indep[0] == indep[1] == pytest.approx(4096 / (0.25 * 1e7))


def test_scheduler_peak_lr_is_used():
    p = nn.Parameter(torch.zeros(3, 3))
    opt = torch.optim.AdamW([p], lr=1e-2)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.01)  # warm-up: lr is 1e-4 now
    (lam,) = apply_timescale(opt, 0.5, B=100, D=1e5)
    assert lam == pytest.approx(100 / (1e-2 * 0.5 * 1e5))


def test_decay_exempt_groups():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    decayed, exempt = decay_exempt(model, weight_decay=0.3)
    assert (
        decayed["weight_decay"] == 0.3
        and exempt["weight_decay"] == 0.0
        and exempt["hpscaling_exempt"]
    )
    assert {id(p) for p in decayed["params"]} == {id(model[0].weight), id(model[1].weight)}
    decayed, exempt = decay_exempt(model, exempt_embeddings=True)
    assert {id(p) for p in decayed["params"]} == {id(model[1].weight)}
    assert len(exempt["params"]) == 4


def test_bad_input():
    p = nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.AdamW([p], lr=1e-3)
    with pytest.raises(ValueError, match="decay"):
        apply_timescale(opt, 0.2, B=10, D=100, decay="decoupled")
    with pytest.raises(ValueError, match="tau"):
        apply_timescale(opt, 0.0, B=10, D=100)
    with pytest.raises(ValueError, match="B"):
        apply_timescale(opt, 0.2, B=-1, D=100)
    with pytest.raises(ValueError, match="B"):
        apply_timescale(opt, 0.2, D=100)
    with pytest.raises(ValueError, match="D"):
        apply_timescale(opt, 0.2, B=10, D=0)
    with pytest.raises(TypeError, match="optimizer"):
        apply_timescale([p], 0.2, B=10, D=100)
    with pytest.raises(ValueError, match="accumulation"):
        global_batch(10, accumulation=0)
    sgd = torch.optim.SGD([p], lr=1e-3)  # SGD groups have weight_decay; drop it to test
    del sgd.param_groups[0]["weight_decay"]
    before = dict(sgd.param_groups[0])
    with pytest.raises(ValueError, match="weight_decay"):
        apply_timescale(sgd, 0.2, B=10, D=100)
    assert sgd.param_groups[0] == before  # nothing changed
    no_lr = torch.optim.AdamW([p], lr=1e-3)
    del no_lr.param_groups[0]["lr"]
    with pytest.raises(ValueError, match="'lr'"):
        apply_timescale(no_lr, 0.2, B=10, D=100)
    with pytest.raises(TypeError, match="model"):
        decay_exempt([p])


def _make(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.LayerNorm(7), nn.Linear(7, 2)).double()


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(3, 8, 5, generator=g, dtype=torch.float64), torch.randn(
        3, 8, 2, generator=g, dtype=torch.float64
    )


TAU, TOKENS_PER_SAMPLE, D = 0.3, 16, 3 * 8 * 16


def _train(model, opt, xs, ys):
    for x, y in zip(xs, ys, strict=True):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _ddp_rank(rank, world_size):
    model = _make()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(decay_exempt(ddp), lr=1e-2)
    per_rank = 8 // world_size
    wd = apply_timescale(opt, TAU, per_rank_B=per_rank * TOKENS_PER_SAMPLE, D=D)
    xs, ys = _data()
    sl = slice(rank * per_rank, (rank + 1) * per_rank)
    _train(ddp, opt, xs[:, sl], ys[:, sl])
    return {"wd": wd, "state": {k: v.clone() for k, v in model.state_dict().items()}}


def test_ddp_two_processes_match_one_process_on_the_global_batch():
    ranks = run_distributed(_ddp_rank, world_size=2)
    model = _make()
    opt = torch.optim.AdamW(decay_exempt(model), lr=1e-2)
    wd = apply_timescale(opt, TAU, B=8 * TOKENS_PER_SAMPLE, D=D)
    assert global_batch(8 * TOKENS_PER_SAMPLE) == 8 * TOKENS_PER_SAMPLE  # no process group here
    xs, ys = _data()
    _train(model, opt, xs, ys)
    for result in ranks:
        assert result["wd"] == pytest.approx(wd, rel=1e-12)
        assert wd[0] > 0
        for name, ref in model.state_dict().items():
            err = (result["state"][name] - ref).norm() / ref.norm()
            assert err.item() <= 1e-6, name
