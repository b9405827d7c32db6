"""Ours and torchft's ``local_sgd.DiLoCo`` agree after three outer steps (same config, same data)."""

from __future__ import annotations

import pytest
import torch
from diloco import run_replicas
from diloco.peer import start_lighthouse, torchft_available, torchft_diloco
from diloco.training import RunSpec

from neurips25_core.testing import assert_close

from .helpers import batches, loss_fn, mlp, run_engine

H, OUTER = 3, 3


def _adamw(p):
    return torch.optim.AdamW(p, lr=3e-2, betas=(0.9, 0.99), weight_decay=0.1)


def _both(rank, world, address):
    from diloco import split_global_batch

    data = batches(H * OUTER, batch=8)
    ours = mlp()
    d, _ = run_engine(ours, data, rank, world, H, _adamw, outer_lr=0.6, grad_clip=1.0)
    theirs = mlp()
    opt = _adamw(list(theirs.parameters()))
    spec = RunSpec(algo="torchft", replicas=world, sync_every=H, outer_lr=0.6)
    ft = torchft_diloco(theirs, opt, spec, rank, world, {"lighthouse": address})
    try:
        for batch in data:
            loss = loss_fn(theirs, split_global_batch(batch, rank, world))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(theirs.parameters()), 1.0)
            opt.step()  # torchft's post-step hook runs its outer step every H
        commits = ft.manager.current_step()
    finally:
        ft.close()
    flat = lambda m: torch.cat([p.detach().reshape(-1) for p in m.parameters()])  # noqa: E731
    return flat(ours), flat(theirs), d.outer_steps, commits


def test_ours_and_torchft_agree_after_three_outer_steps():
    ok, why = torchft_available()
    if not ok:
        pytest.skip(why)
    lighthouse = start_lighthouse(2)
    try:
        results = run_replicas(_both, 2, args=(lighthouse.address(),))
    finally:
        lighthouse.shutdown()
    for ours, theirs, outer, commits in results:
        assert outer == commits == OUTER
        assert_close(ours, theirs, rtol=1e-5)
