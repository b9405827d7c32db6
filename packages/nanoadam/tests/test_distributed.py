"""DDP (gloo, two CPU processes) equals one process on the union batch: masks depend on θ only."""

from __future__ import annotations

import torch
from nanoadam import NanoAdam, param_groups

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close, randn

STEPS = 20


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 3))


def _data():
    return randn(STEPS, 8, 12, seed=1), randn(STEPS, 8, 3, seed=2)


def _opt(model):
    return NanoAdam(
        param_groups(model, exclude=("2.",)),
        lr=1e-2,
        density=0.1,
        final_density=0.05,
        total_steps=STEPS,
        mask_interval=4,
        density_interval=5,
        chunk_size=64,
    )


def _train(model, opt, xs, ys):
    for x, y in zip(xs, ys):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _ddp_rank(rank, world):
    from torch.nn.parallel import DistributedDataParallel

    model = _model()
    ddp = DistributedDataParallel(model)
    xs, ys = _data()
    per = xs.shape[1] // world
    sl = slice(rank * per, (rank + 1) * per)
    return {
        k.removeprefix("module."): v
        for k, v in _train(ddp, _opt(model), xs[:, sl], ys[:, sl]).items()
    }


def test_ddp_equals_single_process():
    model = _model()
    want = _train(model, _opt(model), *_data())
    got = run_distributed(_ddp_rank, world_size=2)
    for rank_params in got:
        for name, ref in want.items():
            assert_close(rank_params[name], ref, rtol=1e-6)
    assert torch.equal(got[0]["0.weight"], got[1]["0.weight"])
