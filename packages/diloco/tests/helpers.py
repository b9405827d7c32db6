"""Shared pieces of the diloco tests: a small MLP, seeded batches, a loss, an engine loop."""

from __future__ import annotations

import torch
from diloco import DiLoCo, DiLoCoConfig, split_global_batch
from torch import nn


def mlp(dtype=torch.float32, seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(dtype)


def batches(steps, batch=8, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        x = torch.randn(batch, 5, generator=g, dtype=dtype)
        out.append((x, torch.sin(x[:, :3] * 2 + 0.5)))
    return out


def loss_fn(model, batch):
    x, y = batch
    return (model(x) - y).square().mean()


def run_engine(
    model,
    data,
    rank,
    world,
    sync_every,
    inner,
    outer_lr,
    outer_momentum=0.9,
    nesterov=True,
    grad_clip=None,
    final_sync=True,
    outer_optimizer=None,
    on_sync=None,
    start=0,
    diloco_state=None,
    inner_state=None,
    model_state=None,
):
    """Train ``model`` with our engine on ``data[start:]``; returns (DiLoCo, inner optimizer)."""
    params = list(model.parameters())
    opt = inner(params)
    cfg = DiLoCoConfig(
        sync_every=sync_every,
        outer_lr=outer_lr,
        outer_momentum=outer_momentum,
        nesterov=nesterov,
        final_sync=final_sync,
    )
    d = DiLoCo(model, opt, cfg, outer_optimizer=outer_optimizer)
    if model_state is not None:  # the replica's own parameters, after DiLoCo checked θ(0)
        model.load_state_dict(model_state)
    if diloco_state is not None:
        d.load_state_dict(diloco_state)
        opt.load_state_dict(inner_state)
    for batch in data[start:]:
        loss = loss_fn(model, split_global_batch(batch, rank, world))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        if d.step() and on_sync is not None:
            on_sync(d)
    return d, opt
