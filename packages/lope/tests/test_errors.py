"""Bad input raises ValueError/TypeError naming the argument, before anything is computed."""

import pytest
import torch
from lope import ops


def _args(N=4, r=3, d_in=6, out=5, T=7):
    return torch.randn(T, d_in), torch.randn(r, d_in), torch.randn(N, out, r), torch.randn(N, d_in)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"poison": (4,)}, ValueError, "poison"),
        ({"poison": (-1,)}, ValueError, "poison"),
        ({"poison": (1, 1)}, ValueError, "poison"),
        ({"poison": (0, 1, 2, 3)}, ValueError, "poison"),
        ({"poison": ("3",)}, TypeError, "poison"),
        ({"poison": (3,), "k": 4}, ValueError, "k"),
        ({"poison": (3,), "k": -1}, ValueError, "k"),
        ({"poison": (3,), "k": 1.5}, TypeError, "k"),
        ({"poison": (3,), "beta": -0.1}, ValueError, "beta"),
        ({"poison": (3,), "beta": float("nan")}, ValueError, "beta"),
        ({"mode": "train"}, ValueError, "mode"),
        ({"router_input": "h"}, ValueError, "router_input"),
        ({"backend": "cuda"}, ValueError, "backend"),
        ({"backend": "Triton"}, ValueError, "backend"),
    ],
)
def test_adapter_rejects_bad_options(kwargs, error, name):
    with pytest.raises(error, match=name):
        ops.adapter(*_args(), 2.0, **kwargs)


def test_one_expert_cannot_hold_a_poisoning_expert():
    with pytest.raises(ValueError, match="poison"):
        ops.adapter(*_args(N=1), 2.0, poison=(0,))


@pytest.mark.parametrize(
    ("index", "bad", "error", "name"),
    [
        (0, torch.randn(7, 5), ValueError, "x"),
        (0, torch.randn(7, 6, dtype=torch.float64), TypeError, "A"),
        (0, torch.ones(7, 6, dtype=torch.long), TypeError, "x"),
        (1, torch.randn(3, 5), ValueError, "x"),
        (2, torch.randn(4, 5, 2), ValueError, "B"),
        (3, torch.randn(4, 3), ValueError, "router"),
        (3, [[0.0]], TypeError, "router"),
    ],
)
def test_adapter_rejects_bad_tensors(index, bad, error, name):
    args = list(_args())
    args[index] = bad
    with pytest.raises(error, match=name):
        ops.adapter(*args, 2.0)


def test_adapter_rejects_bad_scaling():
    with pytest.raises(TypeError, match="scaling"):
        ops.adapter(*_args(), "8")
    with pytest.raises(ValueError, match="scaling"):
        ops.adapter(*_args(), float("inf"))


def test_expert_mix_checks_shapes():
    h, g, B = torch.randn(5, 3), torch.rand(5, 4), torch.randn(4, 6, 3)
    with pytest.raises(ValueError, match="gates"):
        ops.expert_mix(h, g[:, :3], B)
    with pytest.raises(ValueError, match="h"):
        ops.expert_mix(h[:, :2], g, B)
    with pytest.raises(TypeError, match="B"):
        ops.expert_mix(h, g, B.double())
    with pytest.raises(ValueError, match="B"):
        ops.expert_mix(h, g, B[0])


def test_compensate_checks_shapes():
    g, y = torch.rand(5, 4), torch.randn(5, 4, 6)
    with pytest.raises(ValueError, match="expert_out"):
        ops.compensate(g, y[:, :3])
    with pytest.raises(ValueError, match="poison"):
        ops.compensate(g, y, poison=(7,))


def test_route_checks_shapes():
    with pytest.raises(ValueError, match="router"):
        ops.route(torch.randn(5, 3), torch.randn(4, 2))
