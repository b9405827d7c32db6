"""The reduced reproduction's arms: batching, confidence intervals, router mass, every arm runs."""

from __future__ import annotations

import math

import pytest
import torch
from lope import LoPEConfig, get_peft_model
from lope.experiment import (
    ARMS,
    ArmData,
    epoch_batches,
    mean_ci95,
    router_mass,
    run_arms,
)
from lope.noise import HyNoise
from lope.tasks import corrupt_examples, encode, make_instructions

from neurips25_core.models import tiny_llama, tiny_llama_config


def _base():
    return tiny_llama(
        tiny_llama_config(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=24)
    )


def test_epoch_batches_visit_every_example_once_per_epoch():
    x = torch.arange(20)[:, None].repeat(1, 3)
    fn, steps = epoch_batches(x, x, batch_size=4, epochs=2, seed=0)
    assert steps == 10
    first = torch.cat([fn(s)[0][:, 0] for s in range(5)])
    second = torch.cat([fn(s)[0][:, 0] for s in range(5, 10)])
    assert sorted(first.tolist()) == list(range(20)) == sorted(second.tolist())
    assert first.tolist() != second.tolist()
    with pytest.raises(ValueError, match="batch_size"):
        epoch_batches(x, x, batch_size=21, epochs=1, seed=0)
    with pytest.raises(ValueError, match="epochs"):
        epoch_batches(x, x, batch_size=4, epochs=0, seed=0)


def test_mean_ci95_is_the_student_t_interval():
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302652729749464 * 1.0 / math.sqrt(3))
    assert mean_ci95([5.0]) == (5.0, 0.0)
    with pytest.raises(ValueError, match="values"):
        mean_ci95([])


def test_router_mass_equals_the_routers_softmax_on_each_group():
    torch.manual_seed(0)
    model = get_peft_model(_base(), LoPEConfig(r=2, target_modules=["up_proj"]))
    data = make_instructions(6, seed=0)
    x, _ = encode(data)
    flags = [True, False, False, True, False, False]
    mass = router_mass(model, x, flags, batch_size=4)
    layer = next(iter(model.adapted.values()))
    seen = []
    handle = layer.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach()))
    model(input_ids=x, attention_mask=(x != 0).long())
    handle.remove()
    gates = torch.softmax(seen[0].double() @ layer.router.double().T, -1)[..., 3]
    real = x != 0
    for name, rows in (("noisy", torch.tensor(flags)), ("clean", ~torch.tensor(flags))):
        want = gates[real & rows[:, None]].mean()
        assert mass[name] == pytest.approx(float(want), rel=1e-5)
    with pytest.raises(ValueError, match="flags"):
        router_mass(model, x, flags[:-1])


def test_every_arm_trains_and_reports():
    train = make_instructions(48, seed=0)
    noisy, flags = corrupt_examples(train, 0.25, seed=0)
    noise = HyNoise(seed=0)
    data = ArmData(
        train=noisy,
        flags=flags,
        hynoise_train=[(f, noise.corrupt(i), noise.corrupt(r)) for f, i, r in noisy],
        test=make_instructions(12, seed=1),
    )
    base = _base()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    got = run_arms(base, data, ARMS, epochs=2, lr=1e-3, seed=0, batch_size=8, steps_per_stage=2)
    assert set(got) == set(ARMS)
    for arm, metrics in got.items():
        assert 0 <= metrics["exact_match"] <= 100, arm
        assert math.isfinite(metrics["response_loss"]), arm
    assert got["lope"]["steps"] == 4 and got["lope_equal_steps"]["steps"] == 2
    assert got["lope"]["delta_A_stage1"] > 0 and got["lope"]["delta_A_stage2"] > 0
    assert 0 < got["lope"]["router_mass_noisy"] < 1
    # Masking and compensation change the output of the trained adapter.
    assert got["lope_unmasked"]["response_loss"] != got["lope"]["response_loss"]
    # The base model is copied for each arm, never trained in place.
    assert all(torch.equal(v, base.state_dict()[k]) for k, v in before.items())
    with pytest.raises(ValueError, match="arms"):
        run_arms(base, data, ["lora_r3"], epochs=1, lr=1e-3, seed=0)
    with pytest.raises(ValueError, match="router_examples"):
        run_arms(base, data, ["lope"], epochs=1, lr=1e-3, seed=0, router_examples=0)
    with pytest.raises(TypeError, match="router_examples"):
        run_arms(base, data, ["lope"], epochs=1, lr=1e-3, seed=0, router_examples=1.5)
