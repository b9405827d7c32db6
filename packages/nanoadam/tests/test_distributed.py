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


# ------------------------------------------------------------------------------------- FSDP2
def _fsdp_model():
    torch.manual_seed(0)
    # first weight 32x12: two Shard(0) shards of 16 rows = 192 entries = 3 chunks of 64
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def _fsdp_opt(model, chunk_size=64, criterion="small_weight"):
    return NanoAdam(
        param_groups(model, exclude=("2.",)),
        lr=1e-2,
        density=0.1,
        final_density=0.05,
        total_steps=STEPS,
        mask_interval=4,
        density_interval=5,
        chunk_size=chunk_size,
        criterion=criterion,
    )


CRITERIA = ("small_weight", "large_grad")


def _fsdp_rank(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for criterion in CRITERIA:
        model = _fsdp_model()
        fully_shard(model, mesh=mesh)
        errors = []
        try:
            _fsdp_opt(model, chunk_size=100)  # 192-entry shards cut 100-entry chunks
        except ValueError as exc:
            errors.append(str(exc))
        opt = _fsdp_opt(model, criterion=criterion)
        xs, ys = _data()
        per = xs.shape[1] // world
        sl = slice(rank * per, (rank + 1) * per)
        for x, y in zip(xs[:, sl], ys[:, sl]):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        full = {n: p.detach().full_tensor().clone() for n, p in model.named_parameters()}
        out[criterion] = {"params": full, "mask0": opt.mask(model[0].weight), "errors": errors}
    return out


def test_fsdp2_equals_single_process():
    """FSDP2 (fully_shard, Shard(0), gloo): per-shard selection equals the unsharded optimizer."""
    got = run_distributed(_fsdp_rank, world_size=2)
    for criterion in CRITERIA:
        model = _fsdp_model()
        opt = _fsdp_opt(model, criterion=criterion)
        want = _train(model, opt, *_data())
        for rank, per_rank in enumerate(got):
            res = per_rank[criterion]
            assert len(res["errors"]) == 1 and "chunk_size" in res["errors"][0], res["errors"]
            for name, ref in want.items():
                assert_close(res["params"][name], ref, rtol=1e-6)
            # each rank's local mask is its 16 rows of the single-process mask
            rows = slice(16 * rank, 16 * (rank + 1))
            assert torch.equal(res["mask0"], opt.mask(model[0].weight)[rows])
        # the update really is sparse: most first-layer entries never moved
        moved = got[0][criterion]["params"]["0.weight"] != _fsdp_model()[0].weight
        assert 0 < int(moved.sum()) < moved.numel() // 2
