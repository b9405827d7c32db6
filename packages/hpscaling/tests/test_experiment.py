"""The reduced reproduction's training runs: real training, cached, λ from τ, bad specs."""

import math

import pytest
import torch
from hpscaling.experiment import RunSpec, run, train_run

TINY = dict(hidden=16, layers=1, heads=2, seq_len=16, batch=4, tpp=0.1)


def test_run_trains_under_no_grad_sets_lambda_from_tau_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    spec = RunSpec(tau=0.5, **TINY)
    with torch.no_grad():
        first = run(spec, progress=False)
    assert not first["cached"] and first["steps"] >= 15
    assert first["lam"] == pytest.approx(first["B"] / (spec.eta * 0.5 * first["D"]))
    assert first["tau"] == pytest.approx(0.5)
    assert math.log(256) > first["val_loss"] > 0  # learnt something beyond uniform bytes
    assert first["train_loss_tail"] < math.log(256)
    again = run(spec, progress=False)
    assert again["cached"] and again["val_loss"] == first["val_loss"]


def test_same_seed_same_result_and_lambda_changes_it():
    state_a, a = train_run(RunSpec(lam=0.0, **TINY), progress=False)
    state_b, b = train_run(RunSpec(lam=0.0, **TINY), progress=False)
    _, c = train_run(RunSpec(lam=20.0, **TINY), progress=False)
    assert a["val_loss"] == b["val_loss"]
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert c["val_loss"] != a["val_loss"]
    assert a["tau"] == math.inf


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(hidden=16, batch=4, tpp=1.0), "tau"),
        (dict(hidden=16, batch=4, tpp=1.0, tau=0.1, lam=0.1), "tau"),
        (dict(hidden=16, batch=0, tpp=1.0, tau=0.1), "batch"),
        (dict(hidden=16, batch=4, tpp=-1.0, tau=0.1), "tpp"),
        (dict(hidden=16, batch=4, tpp=1.0, tau=0.1, eta=0.0), "eta"),
        (dict(hidden=16, batch=4, tpp=1.0, lam=-1.0), "lam"),
        (dict(hidden=16, batch=4, tpp=1.0, tau=0.1, warmup_fraction=1.0), "warmup_fraction"),
    ],
)
def test_bad_spec(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RunSpec(**kwargs)
    with pytest.raises(TypeError, match="spec"):
        run({"hidden": 16})
