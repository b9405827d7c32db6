"""Vectorised rollouts (CADSConfig(vectorize=True), cads.vmap): the loop's values, refused where
vmap cannot reproduce it."""

from __future__ import annotations

import copy

import pytest
import torch
from cads.budget import Budget
from cads.config import CADSConfig
from cads.digits import mlp_factory, noisy_digits
from cads.solver import CADS
from cads.train import budgeted_train, default_optimizer
from cads.vmap import budgeted_train_vmapped
from torch import nn


def _toy(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 5, generator=gen, dtype=dtype)
    y = torch.randint(0, 3, (37,), generator=gen)
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(5, 9), nn.Tanh(), nn.Linear(9, 3)).to(dtype)
    return x, y, (lambda: copy.deepcopy(base)), gen


def _adam(params):
    return torch.optim.Adam(params, lr=1e-2)


@pytest.mark.parametrize("optimizer", [default_optimizer, _adam], ids=["sgd", "adam"])
def test_vmapped_training_equals_the_loop_for_masks_indices_and_source_weights(optimizer):
    x, y, factory, gen = _toy()
    sources = torch.arange(37) % 4
    selections = [
        torch.rand(37, generator=gen) < 0.4,
        torch.tensor([3, 3, 8, 30]),
        torch.tensor([0.1, 0.0, 0.7, 0.2], dtype=torch.float64),
    ]
    budget, ticks, val = Budget(7, 6), [0, 1, 3, 7], (x[:9], y[:9])
    curves, evals = budgeted_train_vmapped(
        factory,
        (x, y),
        selections,
        budget,
        optimizer,
        [11, 12, 11],
        ticks,
        sources=sources,
        eval_set=val,
    )
    for k, (sel, seed) in enumerate(zip(selections, [11, 12, 11])):
        model, curve = budgeted_train(
            factory,
            (x, y),
            sel,
            budget,
            optimizer,
            torch.Generator().manual_seed(seed),
            ticks,
            sources=sources,
        )
        assert torch.equal(curves[k][0], curve[0])
        torch.testing.assert_close(curves[k][1], curve[1], rtol=0, atol=1e-10)
        with torch.no_grad():
            ref = nn.functional.cross_entropy(model(val[0]), val[1]).item()
        assert abs(evals[k].item() - ref) <= 1e-10


def _digits_solver(vectorize: bool, value: str = "penalty"):
    data = noisy_digits(100, 50, 100)
    config = CADSConfig(Budget(10, 16), outer_steps=3, probe_fraction=0.5, vectorize=vectorize)
    return CADS(
        mlp_factory(0, hidden=32),
        nn.functional.cross_entropy,
        data.train,
        data.val,
        config,
        value=value,
    )


@pytest.mark.parametrize("value", ["penalty", "exact"])
def test_cads_vectorized_equals_the_loop_on_the_digits_mlp(value):
    loop = _digits_solver(False, value).fit(torch.Generator().manual_seed(3))
    vec = _digits_solver(True, value).fit(torch.Generator().manual_seed(3))
    for a, b in zip(loop.history, vec.history, strict=True):
        for key in a:
            torch.testing.assert_close(
                torch.tensor(b[key]), torch.tensor(a[key]), rtol=0, atol=1e-5
            )
    torch.testing.assert_close(vec.param, loop.param, rtol=0, atol=1e-5)


def test_cads_s_vectorized_equals_the_loop_in_float64():
    x, y, factory, _ = _toy()
    sources = torch.arange(37) % 3
    runs = []
    for vectorize in (False, True):
        config = CADSConfig(Budget(6, 5), outer_steps=3, granularity="source", vectorize=vectorize)
        runs.append(
            CADS(
                factory,
                nn.functional.cross_entropy,
                (x, y),
                (x[:8], y[:8]),
                config,
                sources=sources,
            ).fit(torch.Generator().manual_seed(1))
        )
    torch.testing.assert_close(runs[1].weights, runs[0].weights, rtol=0, atol=1e-10)
    for a, b in zip(runs[0].history, runs[1].history, strict=True):
        assert abs(a["mean_penalty"] - b["mean_penalty"]) <= 1e-10


def test_models_and_optimizers_vmap_cannot_reproduce_are_refused():
    x, y, _, _ = _toy(torch.float32)
    mask = torch.ones(37, dtype=torch.bool)
    budget = Budget(2, 4)
    for layer in (nn.BatchNorm1d(9), nn.Dropout(0.1)):
        net = nn.Sequential(nn.Linear(5, 9), layer, nn.Linear(9, 3))
        with pytest.raises(ValueError, match="model_factory"):
            budgeted_train_vmapped(lambda n=net: n, (x, y), [mask], budget, default_optimizer, [0])
    net = nn.Sequential(nn.Linear(5, 3), nn.Dropout(0.0))  # p = 0 is fine
    budgeted_train_vmapped(lambda: net, (x, y), [mask], budget, default_optimizer, [0])
    with pytest.raises(ValueError, match="optimizer_factory"):
        budgeted_train_vmapped(
            lambda: net, (x, y), [mask], budget, lambda p: torch.optim.RMSprop(p), [0]
        )
    with pytest.raises(ValueError, match="seeds"):
        budgeted_train_vmapped(lambda: net, (x, y), [mask, mask], budget, default_optimizer, [0])
    with pytest.raises(TypeError, match="selections"):
        budgeted_train_vmapped(lambda: net, (x, y), [], budget, default_optimizer, [])
    with pytest.raises(TypeError, match="vectorize"):
        CADSConfig(Budget(2, 4), outer_steps=1, vectorize=1)
