"""The engine on real gloo ranks equals reference.py on the same partition; invariants; resume.

Every rank runs several checks inside one process group (two gloo processes start slowly on a
loaded machine, so the checks share one start).
"""

from __future__ import annotations

import torch
from diloco import DiLoCo, DiLoCoConfig, reference_diloco, run_replicas

from neurips25_core.testing import assert_close

from .helpers import batches, loss_fn, mlp, run_engine

STEPS, H = 10, 3


def _adamw(p):
    return torch.optim.AdamW(p, lr=3e-2, betas=(0.9, 0.99), weight_decay=0.1)


def _flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def _two_rank_checks(rank, world, dtype):
    data = batches(STEPS, batch=8, dtype=dtype)
    out = {}
    # 1. The run, with the parameters after every sync (bit-identity across ranks is checked outside).
    synced = []
    model = mlp(dtype)
    d, opt = run_engine(
        model,
        data,
        rank,
        world,
        H,
        _adamw,
        outer_lr=0.6,
        grad_clip=0.5,
        on_sync=lambda dd: synced.append(_flat(dd.model.parameters()).clone()),
    )
    d.finish()
    synced.append(_flat(model.parameters()).clone())
    out["synced"] = synced
    out["final"] = _flat(model.parameters())
    out["outer_steps"], out["inner_steps"] = d.outer_steps, d.inner_steps
    out["adam_steps"] = sorted({int(s["step"]) for s in opt.state.values()})
    out["bytes"], out["calls"] = d.counter.bytes, d.counter.calls
    # 2. Resume: stop after 5 steps, checkpoint, rebuild everything, continue.
    model_a = mlp(dtype)
    d_a, opt_a = run_engine(model_a, data[:5], rank, world, H, _adamw, outer_lr=0.6, grad_clip=0.5)
    saved = (model_a.state_dict(), opt_a.state_dict(), d_a.state_dict())
    model_b = mlp(dtype)
    d_b, _ = run_engine(
        model_b,
        data,
        rank,
        world,
        H,
        _adamw,
        outer_lr=0.6,
        grad_clip=0.5,
        start=5,
        diloco_state=saved[2],
        inner_state=saved[1],
        model_state=saved[0],
    )
    d_b.finish()
    out["resumed"] = _flat(model_b.parameters())
    # 3. A model whose parameters differ across ranks is refused on every rank.
    other = mlp(dtype, seed=rank)
    try:
        DiLoCo(other, _adamw(list(other.parameters())), DiLoCoConfig(sync_every=H))
        out["mismatch"] = None
    except ValueError as exc:
        out["mismatch"] = str(exc)
    return out


def test_two_gloo_ranks_equal_the_reference_and_keep_the_invariants():
    dtype = torch.float32
    results = run_replicas(_two_rank_checks, 2, args=(dtype,))
    data = batches(STEPS, batch=8, dtype=dtype)
    ref_synced = []
    ref = reference_diloco(
        mlp(dtype),
        lambda t: data[t],
        STEPS,
        2,
        H,
        _adamw,
        outer_lr=0.6,
        grad_clip=0.5,
        final_sync=True,  # the engine side runs with final_sync=True (tests/helpers.py)
        loss_fn=loss_fn,
        on_sync=lambda k, theta: ref_synced.append(_flat(theta).clone()),
    )
    r0, r1 = results
    assert len(r0["synced"]) == len(ref_synced) == STEPS // H + 1
    for a, b, want in zip(r0["synced"], r1["synced"], ref_synced, strict=True):
        assert torch.equal(a, b), "ranks differ after a sync"
        assert_close(a, want, rtol=1e-6)
    assert_close(r0["final"], _flat(ref["global"]), rtol=1e-6)
    for r in results:
        assert (r["outer_steps"], r["inner_steps"]) == (STEPS // H + 1, STEPS)
        assert r["adam_steps"] == [STEPS], "the inner AdamW state was reset"
        n_params = sum(p.numel() for p in mlp().parameters())
        assert r["bytes"] == (STEPS // H + 1) * n_params * 4 and r["calls"] == STEPS // H + 1
        assert torch.equal(r["resumed"], r["final"]), (
            "a resumed run differs from the uninterrupted one"
        )
        assert r["mismatch"] is not None and "model" in r["mismatch"] and "differ" in r["mismatch"]


def _four_rank_run(rank, world):
    data = batches(7, batch=8, dtype=torch.float64)
    model = mlp(torch.float64)
    d, _ = run_engine(model, data, rank, world, 2, _adamw, outer_lr=0.6, grad_clip=1.0)
    d.finish()
    return _flat(model.parameters())


def test_four_gloo_ranks_equal_the_reference_in_float64():
    results = run_replicas(_four_rank_run, 4)
    data = batches(7, batch=8, dtype=torch.float64)
    ref = reference_diloco(
        mlp(torch.float64),
        lambda t: data[t],
        7,
        4,
        2,
        _adamw,
        outer_lr=0.6,
        grad_clip=1.0,
        final_sync=True,
        loss_fn=loss_fn,
    )
    for r in results:
        assert torch.equal(r, results[0])
        assert_close(r, _flat(ref["global"]), rtol=1e-12)
