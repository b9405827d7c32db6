"""Metrics on hand-built circuits, and the data helpers (item 5 of the issue)."""

from __future__ import annotations

import pytest
import torch
from dlgn import Circuit, LogicNet
from dlgn.data import digits, thermometer, two_xor
from dlgn.metrics import (
    discrete_accuracy,
    discretization_gap,
    gate_histogram,
    mean_max_softmax,
    train_mode_accuracy,
    unused_fraction,
    unused_masks,
)
from dlgn.reference import unused_mask

t = torch.tensor


def test_unused_on_hand_built_circuit():
    # in 4 -> layer0 (4) -> layer1 (4) -> layer2 (2) -> GroupSum(1)
    # layer2: n0 = A(l1[0]) reads only a; n1 = XOR(l1[2], l1[3]).
    # layer1: n0 = ¬B(l0[0], l0[1]) reads only l0[1]; n1 unused (nobody reads it);
    #         n2 = 0 (constant, reads nothing), n3 = AND(l0[2], l0[3]).
    # layer0: read by used gates: l0[1], l0[2], l0[3]; l0[0] is only the ignored a of ¬B.
    c = Circuit(
        in_dim=4,
        ids=[t([7, 7, 7, 7]), t([10, 6, 0, 1]), t([3, 6])],
        ia=[t([0, 1, 2, 3]), t([0, 0, 0, 2]), t([0, 2])],
        ib=[t([1, 2, 3, 0]), t([1, 1, 1, 3]), t([1, 3])],
        k=1,
        tau=1.0,
    )
    masks = unused_masks(c)
    assert [m.tolist() for m in masks] == [
        [True, False, False, False],
        [False, True, False, False],
        [False, False],
    ]
    frac = unused_fraction(c)
    assert frac["per_layer"] == [0.25, 0.25, 0.0]
    assert frac["total"] == pytest.approx(2 / 10)
    as_lists = [(i.tolist(), a.tolist(), b.tolist()) for i, a, b in zip(c.ids, c.ia, c.ib)]
    assert [m.tolist() for m in masks] == unused_mask(as_lists)


def test_unused_matches_reference_on_random_nets():
    for seed in range(5):
        torch.manual_seed(seed)
        net = LogicNet.from_widths(16, [32, 24, 12], num_classes=3, connections="random")
        for layer in net.logic_layers:
            layer.weight.data = torch.randn(layer.out_dim, 16) * 3
        c = net.discretize()
        as_lists = [(i.tolist(), a.tolist(), b.tolist()) for i, a, b in zip(c.ids, c.ia, c.ib)]
        assert [m.tolist() for m in unused_masks(net)] == unused_mask(as_lists)


def test_accuracies_and_gap():
    torch.manual_seed(0)
    net = LogicNet.from_widths(8, [16, 8], num_classes=2, tau=2.0, mode="gumbel")
    x = torch.randint(0, 2, (50, 8)).float()
    y = net.eval()(x).argmax(-1)
    assert discrete_accuracy(net, x, y) == 1.0
    assert not net.training  # restored
    net.train()
    g1 = train_mode_accuracy(net, x, y, torch.Generator().manual_seed(1))
    g2 = train_mode_accuracy(net, x, y, torch.Generator().manual_seed(1))
    assert g1 == g2 and net.training
    assert net[0].generator is None  # the metric's generator was only borrowed
    assert discretization_gap(net, x, y, torch.Generator().manual_seed(1)) == pytest.approx(g1 - 1)
    # The softmax mixture with peaked logits equals the circuit: zero gap.
    for layer in net.logic_layers:
        layer.mode = "softmax"
        layer.weight.data = torch.nn.functional.one_hot(layer.weight.argmax(-1), 16) * 60.0
    assert discretization_gap(net, x, y) == 0.0
    assert mean_max_softmax(net) == pytest.approx(1.0)
    hist = gate_histogram(net)
    assert hist.shape == (2, 16) and hist.sum(-1).tolist() == [16, 8]


def test_thermometer_and_datasets():
    x = t([[0.0, 5.0, 16.0]])
    assert thermometer(x, [4, 8, 12]).tolist() == [[0, 1, 1, 0, 0, 1, 0, 0, 1]]
    d = digits()
    assert d["x_train"].shape == (1438, 192) and d["x_test"].shape == (359, 192)
    assert set(d["x_train"].unique().tolist()) == {0.0, 1.0}
    assert sorted(set(d["y_test"].tolist())) == list(range(10))
    xor = two_xor(256, 64, seed=1)
    i, j, k, l_ = xor["taps"].tolist()
    xb = xor["x_train"].long()
    assert torch.equal(xor["y_train"], 2 * (xb[:, i] ^ xb[:, j]) + (xb[:, k] ^ xb[:, l_]))
    with pytest.raises(ValueError, match="thresholds"):
        thermometer(x, [])
    with pytest.raises(TypeError, match="x: expected a torch"):
        thermometer([1.0], [0])
