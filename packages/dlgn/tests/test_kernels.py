"""Triton kernels (under TRITON_INTERPRET=1 on CPU) equal the torch path: forward, grads, eval."""

from __future__ import annotations

import pytest
import torch
from dlgn import LogicNet, logic_layer, pack_bits, packed_forward

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, check_forward_backward

pytestmark = pytest.mark.skipif(
    not triton_usable(),
    reason="Triton needs a GPU or TRITON_INTERPRET=1 (set by the root conftest)",
)


def _inputs(batch, in_dim, out_dim, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, in_dim, generator=g).requires_grad_(True)
    ia = torch.randint(0, in_dim, (out_dim,), generator=g)
    ib = torch.randint(0, in_dim, (out_dim,), generator=g)
    ib[:3] = ia[:3]  # a neuron reading one input twice (the random wiring allows it)
    w = torch.softmax(3 * torch.randn(out_dim, 16, generator=g), -1).requires_grad_(True)
    return x, ia, ib, w


@pytest.mark.parametrize(("batch", "in_dim", "out_dim"), [(1, 5, 7), (37, 19, 23), (70, 33, 50)])
def test_triton_layer_equals_torch_forward_backward(batch, in_dim, out_dim):
    x, ia, ib, w = _inputs(batch, in_dim, out_dim, seed=batch)
    errors = check_forward_backward(
        lambda x, w: logic_layer(x, ia, ib, w, backend="triton"),
        lambda x, w: logic_layer(x, ia, ib, w, backend="torch"),
        [x, w],
        rtol=1e-5,
        grad_rtol=1e-5,
        names=["x", "w"],
    )
    assert set(errors) == {"out0", "grad_x", "grad_w"}


def test_triton_net_chains_feature_major_and_is_deterministic():
    torch.manual_seed(0)
    net_t = LogicNet.from_widths(20, [30, 24], num_classes=4, tau=3.0, backend="triton")
    net_c = LogicNet.from_widths(20, [30, 24], num_classes=4, tau=3.0, backend="torch")
    net_c.load_state_dict(net_t.state_dict())
    x = torch.rand(13, 20)
    grads = []
    for net in (net_t, net_c, net_t):
        net.zero_grad()
        out = net(x)
        out.pow(2).sum().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    assert_close(net_t(x), net_c(x), rtol=1e-5)
    for gt, gc, gt2 in zip(*grads):
        assert_close(gt, gc, rtol=1e-5)
        assert torch.equal(gt, gt2)  # no atomics: bitwise reproducible


@pytest.mark.parametrize("batch", [1, 37, 100])
def test_triton_packed_eval_equals_torch(batch):
    torch.manual_seed(batch)
    net = LogicNet.from_widths(16, [24, 20], num_classes=5, connections="random").eval()
    for layer in net.logic_layers:
        layer.weight.data = torch.randn(layer.out_dim, 16) * 3
    x = torch.randint(0, 2, (batch, 16)).float()
    packed = pack_bits(x, word_bits=32)
    assert torch.equal(packed_forward(net, packed, backend="triton"), packed_forward(net, packed))
    with pytest.raises(TypeError, match="int32"):
        packed_forward(net, pack_bits(x, word_bits=64), backend="triton")


def test_triton_rejects_float64():
    x, ia, ib, w = _inputs(4, 5, 6, seed=0)
    with pytest.raises(TypeError, match="float32"):
        logic_layer(x.double(), ia, ib, w, backend="triton")


def test_triton_gumbel_net_equals_torch_with_a_shared_generator():
    """GLGN training steps on the Triton path sample the same circuits and get the same grads."""
    nets = {}
    for backend in ("triton", "torch"):
        torch.manual_seed(5)
        nets[backend] = LogicNet.from_widths(
            18,
            [26, 20],
            num_classes=4,
            tau=3.0,
            mode="gumbel",
            backend=backend,
            generator=torch.Generator().manual_seed(9),
        )
    x = torch.randint(0, 2, (11, 18), generator=torch.Generator().manual_seed(1)).float()
    for _ in range(2):  # two draws: the generators advance alike
        outs, grads = [], []
        for net in nets.values():
            net.zero_grad()
            out = net(x)
            (out * torch.arange(4.0)).sum().backward()
            outs.append(out)
            grads.append([p.grad.clone() for p in net.parameters()])
        assert torch.equal(outs[0], outs[1])  # binary activations of one sampled circuit
        for gt, gc in zip(*grads):
            assert_close(gt, gc, rtol=1e-5)
