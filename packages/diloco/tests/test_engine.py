"""The engine's API at world size 1: arguments, counters, global_model, attach, state dicts."""

from __future__ import annotations

import pytest
import torch
from diloco import ByteCounter, DiLoCo, DiLoCoConfig, paper_outer_lr, split_global_batch

from .helpers import batches, mlp, run_engine


def _adamw(p):
    return torch.optim.AdamW(p, lr=1e-2)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"sync_every": 0}, "sync_every"),
        ({"sync_every": 2.0}, "sync_every"),
        ({"sync_every": True}, "sync_every"),
        ({"outer_lr": 0.0}, "outer_lr"),
        ({"outer_lr": -1.0}, "outer_lr"),
        ({"outer_lr": float("nan")}, "outer_lr"),
        ({"outer_momentum": 1.0}, "outer_momentum"),
        ({"outer_momentum": -0.1}, "outer_momentum"),
        ({"bucket_mb": 0}, "bucket_mb"),
        ({"backup_device": "nowhere"}, "backup_device"),
    ],
)
def test_config_rejects_bad_values_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DiLoCoConfig(**kwargs)


def test_config_rejects_non_bool_flags():
    with pytest.raises(TypeError, match="nesterov"):
        DiLoCoConfig(nesterov=1)


def test_paper_outer_lr_is_fig7():
    assert [paper_outer_lr(m) for m in (1, 2, 3, 4, 8, 16)] == [0.4, 0.6, 0.6, 0.6, 0.8, 0.8]
    with pytest.raises(ValueError, match="replicas"):
        paper_outer_lr(0)


def test_default_outer_lr_follows_the_world_size():
    model = mlp()
    d = DiLoCo(model, _adamw(list(model.parameters())))
    assert d.outer_lr == 0.4 and d.config.sync_every == 30
    group = d.outer_optimizer.param_groups[0]
    assert group["nesterov"] and group["momentum"] == 0.9 and group["lr"] == 0.4


def test_split_global_batch_slices_contiguously_and_checks_divisibility():
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    xs, ys = split_global_batch((x, y), 2, 3)
    assert torch.equal(xs, x[4:6]) and torch.equal(ys, y[4:6])
    with pytest.raises(ValueError, match="not divisible"):
        split_global_batch(x, 0, 4)
    with pytest.raises(ValueError, match="rank"):
        split_global_batch(x, 3, 3)
    with pytest.raises(ValueError, match="world"):
        split_global_batch(x, 0, 0)
    with pytest.raises(ValueError, match="first dimensions"):
        split_global_batch((x, y[:4]), 0, 2)
    with pytest.raises(TypeError, match="batch"):
        split_global_batch([1, 2], 0, 1)


def test_bad_model_and_optimizers_are_refused():
    model = mlp()
    with pytest.raises(TypeError, match="model"):
        DiLoCo("model", _adamw(list(model.parameters())))
    with pytest.raises(TypeError, match="inner_optimizer"):
        DiLoCo(model, "adamw")
    other = mlp()
    with pytest.raises(ValueError, match="inner_optimizer"):
        DiLoCo(model, _adamw(list(other.parameters())))
    with pytest.raises(ValueError, match="outer_optimizer"):
        DiLoCo(
            model,
            _adamw(list(model.parameters())),
            outer_optimizer=torch.optim.SGD(other.parameters(), lr=1),
        )
    with pytest.raises(TypeError, match="config"):
        DiLoCo(model, _adamw(list(model.parameters())), config={"sync_every": 3})
    frozen = mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="model"):
        DiLoCo(frozen, torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1))


def test_final_sync_is_off_by_default_as_in_the_paper():
    import inspect

    from diloco import reference_diloco
    from diloco.training import RunSpec

    assert DiLoCoConfig().final_sync is False and RunSpec().final_sync is False
    assert inspect.signature(reference_diloco).parameters["final_sync"].default is False
    data = batches(7)
    model = mlp()
    params = list(model.parameters())
    opt = _adamw(params)
    d = DiLoCo(model, opt, DiLoCoConfig(sync_every=3, outer_lr=0.5))
    for t in range(7):
        opt.zero_grad()
        x, y = data[t]
        (model(x) - y).square().mean().backward()
        opt.step()
        d.step()
    before = [g.clone() for g in d.backup]
    assert not d.finish() and (d.inner_steps, d.outer_steps) == (7, 2)
    for p, g in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, g), "the default finish() must end at θ_global, untouched"


def test_counts_final_sync_and_global_model():
    data = batches(7)
    model = mlp()
    d, _ = run_engine(model, data, 0, 1, 3, _adamw, outer_lr=0.5)
    assert (d.inner_steps, d.outer_steps) == (7, 2)
    global_params = [g.clone() for g in d.backup]
    local = [p.detach().clone() for p in model.parameters()]
    with d.global_model() as m:
        for p, g in zip(m.parameters(), global_params, strict=True):
            assert torch.equal(p, g)
    for p, v in zip(model.parameters(), local, strict=True):
        assert torch.equal(p, v), "global_model() did not bring the replica back"
    assert d.finish() and d.outer_steps == 3
    assert not d.finish(), "finish() after a sync has nothing to do"
    model2 = mlp()
    d2, _ = run_engine(model2, data, 0, 1, 3, _adamw, outer_lr=0.5, final_sync=False)
    assert not d2.finish() and d2.outer_steps == 2
    for p, g in zip(model2.parameters(), d2.backup, strict=True):
        assert torch.equal(p, g), "without final_sync the model ends at θ_global"


def test_attach_runs_the_outer_step_as_a_post_step_hook():
    data = batches(6)
    a, b = mlp(), mlp()
    run_engine(a, data, 0, 1, 2, _adamw, outer_lr=0.5)
    opt = _adamw(list(b.parameters()))
    with DiLoCo(b, opt, DiLoCoConfig(sync_every=2, outer_lr=0.5)) as d:
        for x, y in data:
            loss = (b(x) - y).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert d.outer_steps == 3
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_outer_optimizer_factory_and_byte_counter():
    model = mlp()
    d = DiLoCo(
        model,
        _adamw(list(model.parameters())),
        outer_optimizer=lambda p: torch.optim.SGD(p, lr=0.3),
    )
    assert d.outer_optimizer.param_groups[0]["lr"] == 0.3
    c = ByteCounter()
    c.add(torch.zeros(10, dtype=torch.float32))
    assert (c.bytes, c.calls) == (40, 1)


def test_state_dict_that_does_not_fit_is_refused():
    model = mlp()
    d = DiLoCo(model, _adamw(list(model.parameters())), DiLoCoConfig(sync_every=3))
    state = d.state_dict()
    bigger = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    d_big = DiLoCo(bigger, _adamw(list(bigger.parameters())), DiLoCoConfig(sync_every=3))
    before = [g.clone() for g in d_big.backup]
    with pytest.raises(ValueError, match="state"):
        d_big.load_state_dict(state)
    for g, b in zip(d_big.backup, before, strict=True):
        assert torch.equal(g, b), "a refused state dict changed something"
    other_h = DiLoCo(model, _adamw(list(model.parameters())), DiLoCoConfig(sync_every=4))
    with pytest.raises(ValueError, match="sync_every"):
        other_h.load_state_dict(state)
    with pytest.raises(ValueError, match="missing"):
        d.load_state_dict({"global": []})
