"""Bit-packed inference is bit-exact with the float eval circuit (item 4 of the issue)."""

from __future__ import annotations

import pytest
import torch
from dlgn import LogicNet, pack_bits, packed_forward
from dlgn.packed import unpack_bits


@pytest.mark.parametrize("word_bits", [32, 64])
@pytest.mark.parametrize("batch", [1, 37, 64, 100])
def test_packed_equals_float_eval(batch, word_bits):
    torch.manual_seed(batch + word_bits)
    net = LogicNet.from_widths(20, [40, 36, 30], num_classes=3, tau=7.0, connections="random")
    for layer in net.logic_layers:  # spread the gates over all 16 ids
        layer.weight.data = torch.randn(layer.out_dim, 16) * 3
    net.eval()
    x = torch.randint(0, 2, (batch, 20)).float()
    counts = packed_forward(net, pack_bits(x, word_bits))
    scores = net(x)
    assert counts.dtype == torch.int64 and counts.shape == (batch, 3)
    assert torch.equal(counts.double(), (scores.double() * 7.0).round())
    assert torch.allclose(counts.float(), scores * 7.0, atol=1e-4, rtol=0)
    assert torch.equal(counts.argmax(-1), scores.argmax(-1))
    # Every gate id occurs, so every bitwise expression is exercised.
    assert set(torch.cat(net.discretize().ids).tolist()) == set(range(16))


@pytest.mark.parametrize("word_bits", [32, 64])
def test_padding_bits_are_ignored(word_bits):
    # Constant-one gates set every padding bit; counts must still count only real samples.
    torch.manual_seed(0)
    net = LogicNet.from_widths(4, [8], num_classes=2, tau=1.0, connections="random").eval()
    net[0].weight.data.zero_()
    net[0].weight.data[:, 15] = 1.0
    x = torch.randint(0, 2, (5, 4)).float()
    counts = packed_forward(net, pack_bits(x, word_bits))
    assert counts.tolist() == [[4, 4]] * 5


@pytest.mark.parametrize("word_bits", [32, 64])
def test_pack_roundtrip_and_top_bit(word_bits):
    x = torch.zeros(word_bits + 3, 2, dtype=torch.bool)
    x[word_bits - 1, 0] = True  # the sign bit of the first word
    x[word_bits + 2, 1] = True
    p = pack_bits(x, word_bits)
    assert p.words.shape == (2, 2) and p.batch_size == word_bits + 3
    assert p.words.dtype == (torch.int32 if word_bits == 32 else torch.int64)
    assert p.words[0, 0] < 0
    assert torch.equal(unpack_bits(p), x)


def test_pack_bits_bad_input():
    with pytest.raises(ValueError, match="x_bool: expected binary"):
        pack_bits(torch.tensor([[0.0, 0.5]]))
    with pytest.raises(ValueError, match="x_bool: expected binary"):
        pack_bits(torch.tensor([[2, 1]]))
    with pytest.raises(ValueError, match="word_bits: expected 32 or 64"):
        pack_bits(torch.tensor([[0, 1]]), word_bits=16)
    with pytest.raises(ValueError, match="x_bool: expected shape"):
        pack_bits(torch.tensor([0, 1]))
    torch.manual_seed(0)
    net = LogicNet.from_widths(4, [8], num_classes=2, connections="random")
    with pytest.raises(ValueError, match="packed: expected 4 packed features"):
        packed_forward(net, pack_bits(torch.ones(3, 5)))
    with pytest.raises(TypeError, match="packed: expected PackedBits"):
        packed_forward(net, torch.ones(3, 4))
