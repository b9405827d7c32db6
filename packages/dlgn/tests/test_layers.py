"""LogicLayer, GroupSum, LogicNet on the torch path against the float64 reference (item 2)."""

from __future__ import annotations

import pytest
import torch
from dlgn import GroupSum, LogicLayer, LogicNet, logic_layer
from dlgn.functional import gumbel_noise, random_connections, unique_connections
from dlgn.reference import dense_layer, gumbel_st_grad

from neurips25_core.testing import assert_close, check_forward_backward


def _inputs(batch, in_dim, out_dim, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, in_dim, dtype=dtype, generator=g, requires_grad=True)
    ia = torch.randint(0, in_dim, (out_dim,), generator=g)
    ib = torch.randint(0, in_dim, (out_dim,), generator=g)
    w = torch.softmax(torch.randn(out_dim, 16, dtype=dtype, generator=g), -1).requires_grad_(True)
    return x, ia, ib, w


@pytest.mark.parametrize(("batch", "in_dim", "out_dim"), [(1, 3, 5), (7, 13, 11), (33, 17, 40)])
def test_torch_layer_equals_dense_sum_forward_backward(batch, in_dim, out_dim):
    x, ia, ib, w = _inputs(batch, in_dim, out_dim, seed=batch)
    check_forward_backward(
        lambda x, w: logic_layer(x, ia, ib, w, backend="torch"),
        lambda x, w: dense_layer(x, ia, ib, w),
        [x, w],
        rtol=1e-12,
        grad_rtol=1e-12,
        names=["x", "w"],
    )


def test_torch_layer_fp32_close_to_float64():
    x, ia, ib, w = _inputs(19, 23, 29, seed=4, dtype=torch.float32)
    check_forward_backward(
        lambda x, w: logic_layer(x, ia, ib, w, backend="torch"),
        lambda x, w: dense_layer(x, ia, ib, w),
        [x, w],
        names=["x", "w"],
    )


def test_gradcheck_softmax_layer():
    torch.manual_seed(0)
    layer = LogicLayer(9, 7, connections="random", mode="softmax").double()
    x = torch.rand(5, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, z: _with_weight(layer, z)(x), (x, layer.weight))


def _with_weight(layer, z):
    def run(x):
        return logic_layer(x, layer.ia, layer.ib, torch.softmax(z, -1), backend="torch")

    return run


def test_gumbel_layer_grads_equal_analytic_st():
    torch.manual_seed(1)
    layer = LogicLayer(
        10, 8, mode="gumbel", gumbel_tau=0.8, generator=torch.Generator().manual_seed(7)
    ).double()
    x = torch.rand(6, 10, dtype=torch.float64, requires_grad=True)
    up = torch.randn(6, 8, dtype=torch.float64)
    (layer(x) * up).sum().backward()
    noise = gumbel_noise((8, 16), torch.Generator().manual_seed(7), torch.float64)
    z = layer.weight.detach()
    hard = torch.nn.functional.one_hot((z + noise).argmax(-1), 16).double()
    # dL/dw of the dense layer at the sampled one-hot weights, then the ST formula.
    w = hard.clone().requires_grad_(True)
    xr = x.detach().requires_grad_(True)
    (dense_layer(xr, layer.ia, layer.ib, w) * up).sum().backward()
    assert_close(layer.weight.grad, gumbel_st_grad(w.grad, z, noise, 0.8), rtol=1e-12)
    assert_close(x.grad, xr.grad, rtol=1e-12)


def test_gumbel_noise_shared_by_batch_binary_stays_binary():
    torch.manual_seed(2)
    layer = LogicLayer(12, 16, mode="gumbel", generator=torch.Generator().manual_seed(3))
    row = torch.randint(0, 2, (1, 12)).float()
    y = layer(row.expand(9, 12).contiguous())
    assert (y == y[0]).all(), "duplicated rows got different circuits"
    assert ((y == 0) | (y == 1)).all()
    # A fresh forward draws fresh noise: the circuit changes across calls.
    circuits = {tuple(layer.gate_weights().argmax(-1).tolist()) for _ in range(5)}
    assert len(circuits) > 1


def test_eval_mode_is_argmax_circuit_for_every_mode():
    for mode in ("softmax", "gumbel", "hard_st"):
        torch.manual_seed(3)
        layer = LogicLayer(8, 8, mode=mode).eval()
        w = layer.gate_weights()
        assert torch.equal(w.argmax(-1), layer.weight.argmax(-1)) and (w.sum(-1) == 1).all()


def test_hard_st_is_deterministic_argmax():
    torch.manual_seed(4)
    layer = LogicLayer(8, 8, mode="hard_st")
    assert torch.equal(layer.gate_weights(), layer.gate_weights())


def test_grad_factor_scales_input_grad():
    torch.manual_seed(5)
    a = LogicLayer(6, 6, grad_factor=2.0).double()
    b = LogicLayer(6, 6).double()
    b.load_state_dict(a.state_dict())
    x1 = torch.rand(4, 6, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    a(x1).sum().backward()
    b(x2).sum().backward()
    assert_close(x1.grad, 2 * x2.grad, rtol=1e-12)
    assert_close(a.weight.grad, b.weight.grad, rtol=1e-12)


def test_unique_wiring_properties():
    a, b = unique_connections(10, 12, torch.Generator().manual_seed(0))
    assert set(a.tolist()) | set(b.tolist()) == set(range(10))
    assert (a != b).all()
    pairs = {tuple(sorted(p)) for p in zip(a.tolist(), b.tolist())}
    assert len(pairs) == 12
    a, b = random_connections(10, 12, torch.Generator().manual_seed(0))
    assert set(a.tolist()) | set(b.tolist()) == set(range(10))


def test_group_sum_and_net():
    assert GroupSum(2, tau=4.0)(torch.ones(3, 8)).tolist() == [[1.0, 1.0]] * 3
    torch.manual_seed(0)
    net = LogicNet.from_widths(12, [24, 20], num_classes=5, tau=2.0, mode="gumbel")
    assert net(torch.rand(3, 12)).shape == (3, 5)
    c = net.discretize()
    assert c.widths == [24, 20] and c.k == 5 and c.tau == 2.0
    assert torch.equal(c.ids[0], net[0].weight.argmax(-1))


def test_checkpoint_that_does_not_fit_is_refused():
    torch.manual_seed(0)
    small = LogicNet.from_widths(12, [24, 20], num_classes=5)
    other = LogicNet.from_widths(12, [24, 30], num_classes=5)
    with pytest.raises(RuntimeError, match="size mismatch"):
        other.load_state_dict(small.state_dict())
    again = LogicNet.from_widths(12, [24, 20], num_classes=5)
    again.load_state_dict(small.state_dict())
    x = torch.rand(4, 12).round()
    assert torch.equal(again.eval()(x), small.eval()(x))  # the wiring travels with the weights


def test_bad_input_errors():
    with pytest.raises(ValueError, match="2\\*out_dim >= in_dim"):
        LogicLayer(10, 4, connections="unique")
    with pytest.raises(ValueError, match="gumbel_tau"):
        LogicLayer(4, 4, mode="gumbel", gumbel_tau=0.0)
    with pytest.raises(ValueError, match="gumbel_tau"):
        LogicLayer(4, 4, gumbel_tau=-1.0)
    with pytest.raises(ValueError, match="mode"):
        LogicLayer(4, 4, mode="sigmoid")
    with pytest.raises(ValueError, match="connections"):
        LogicLayer(4, 4, connections="learnable")
    with pytest.raises(ValueError, match="multiple of num_classes"):
        LogicNet.from_widths(4, [4, 6], num_classes=4)
    with pytest.raises(ValueError, match="n % 4"):
        GroupSum(4)(torch.ones(2, 6))
    layer = LogicLayer(4, 4)
    with pytest.raises(ValueError, match="x: expected shape \\(B, 4\\)"):
        layer(torch.ones(2, 5))
    with pytest.raises(TypeError, match="x: expected a floating"):
        layer(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="x: expected a floating"):
        layer(torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="backend"):
        LogicLayer(4, 4, backend="cuda")
    with pytest.raises(TypeError, match="generator"):
        LogicLayer(4, 4, generator=0)
    with pytest.raises(ValueError, match="grad_factor"):
        LogicLayer(4, 4, grad_factor=0.0)
    with pytest.raises(TypeError, match="out_dim: expected an int"):
        LogicLayer(4, 4.0)
    with pytest.raises(ValueError, match="x: expected shape \\(B, 4\\)"):
        layer(torch.ones(4))
    with pytest.raises(TypeError, match=r"x: expected a torch\.Tensor"):
        layer([[0.0] * 4])
    with pytest.raises(ValueError, match="GroupSum k=3 does not divide"):
        LogicNet(LogicLayer(4, 4), GroupSum(3))
    with pytest.raises(ValueError, match="do not chain"):
        LogicNet(LogicLayer(4, 4), LogicLayer(6, 4), GroupSum(2))
    with pytest.raises(ValueError, match="connections: expected one wiring or one per layer"):
        LogicNet.from_widths(4, [4, 4], num_classes=2, connections=["random"])
