"""Bad input raises ValueError/TypeError naming the argument, before anything is computed."""

from __future__ import annotations

import math

import pytest
import torch
from capt import capsule_forward, capsule_slots, check_alpha, instance_semantics, write_slots

from neurips25_core.testing import randn


@pytest.fixture
def setup(toy_stack, make_masks):
    layers, norms = toy_stack(3, 5)
    attn, inst = make_masks(2, 6, "right")
    e = randn(2, 6, 5, seed=0, dtype=torch.float64)
    p = randn(3, 1, 5, seed=1, dtype=torch.float64)
    return e, inst, attn, layers, p, norms


def _raises(exc, match, fn, *args, **kw):
    with pytest.raises(exc, match=match):
        fn(*args, **kw)


def test_instance_semantics_errors():
    e = randn(2, 4, 3, seed=0)
    _raises(TypeError, "embeds", instance_semantics, e.numpy(), torch.ones(2, 4))
    _raises(
        TypeError,
        "embeds",
        instance_semantics,
        torch.ones(2, 4, 3, dtype=torch.long),
        torch.ones(2, 4),
    )
    _raises(ValueError, "embeds", instance_semantics, e[0], torch.ones(2, 4))
    _raises(ValueError, "mask", instance_semantics, e, torch.ones(2, 5))
    _raises(TypeError, "mask", instance_semantics, e, [[1, 1, 1, 1]] * 2)
    _raises(ValueError, "mask", instance_semantics, e, torch.full((2, 4), 2))
    zero_row = torch.ones(2, 4)
    zero_row[1] = 0
    _raises(ValueError, r"mask: rows \[1\].*all-zero", instance_semantics, e, zero_row)


@pytest.mark.parametrize("alpha", [math.nan, math.inf, -math.inf])
def test_non_finite_alpha(alpha, setup):
    _raises(ValueError, "alpha", check_alpha, alpha)
    _raises(ValueError, "alpha", capsule_forward, *setup[:5], [0, 1, 2], alpha=alpha)


def test_alpha_type():
    _raises(TypeError, "alpha", check_alpha, "1.0")
    _raises(TypeError, "alpha", check_alpha, True)
    _raises(TypeError, "alpha", check_alpha, torch.tensor(1.0))


def test_slots_errors():
    p = randn(1, 4, seed=0)
    _raises(ValueError, "fusion", capsule_slots, p, randn(2, 4, seed=1), fusion="mul")
    _raises(ValueError, "semantics", capsule_slots, p, randn(2, 5, seed=1))
    _raises(ValueError, "prompts", capsule_slots, p[0], randn(2, 4, seed=1))
    _raises(ValueError, "slots", write_slots, randn(2, 3, 4, seed=0), randn(2, 4, 4, seed=1))
    _raises(ValueError, "slots", write_slots, randn(2, 3, 4, seed=0), randn(3, 1, 4, seed=1))


def test_capsule_forward_errors(setup):
    e, inst, attn, layers, p, _ = setup
    args = (e, inst, attn, layers)
    _raises(ValueError, "layer_ids: layer 3 out of range", capsule_forward, *args, p, [0, 1, 3])
    _raises(ValueError, "layer_ids: layer -1 out of range", capsule_forward, *args, p, [-1, 0, 1])
    _raises(ValueError, "layer_ids: expected sorted unique", capsule_forward, *args, p, [1, 0, 2])
    _raises(ValueError, "layer_ids: expected one per prompt row", capsule_forward, *args, p, [0, 1])
    _raises(TypeError, "layer_ids", capsule_forward, *args, p, "012")
    _raises(
        ValueError,
        "instance_mask: expected shape",
        capsule_forward,
        e,
        inst[:, :5],
        attn,
        layers,
        p,
        [0, 1, 2],
    )
    zero = inst.clone()
    zero[1] = 0
    _raises(
        ValueError,
        r"instance_mask: rows \[1\]",
        capsule_forward,
        e,
        zero,
        attn,
        layers,
        p,
        [0, 1, 2],
    )
    short, on_pad = attn.clone(), inst.clone()
    short[1, -1], on_pad[1, -1] = 0, 1  # a source token on a padded position
    _raises(
        ValueError,
        "instance_mask: selects padding",
        capsule_forward,
        e,
        on_pad,
        short,
        layers,
        p,
        [0, 1, 2],
    )
    _raises(ValueError, "capsule_length", capsule_forward, *args, p[:, :0], [0, 1, 2])
    _raises(ValueError, "prompts: expected width", capsule_forward, *args, p[..., :4], [0, 1, 2])
    _raises(
        ValueError, "instance_source", capsule_forward, *args, p, [0, 1, 2], instance_source="mean"
    )
    _raises(ValueError, "norms", capsule_forward, *args, p, [0, 1, 2], instance_source="hidden")
    _raises(
        ValueError,
        "fusion",
        capsule_forward,
        *args,
        p,
        [0, 1, 2],
        fusion="concat",
        instance_source="none",
    )
    _raises(ValueError, "backend", capsule_forward, *args, p, [0, 1, 2], backend="triton")
