"""JetBlock and baselines: decode = full forward, padding, init, ablations, bad input."""

import pytest
import torch
from jetnemotron.layers import GatedDeltaNetBlock, JetBlock, Mamba2Block
from jetnemotron.ops import dynamic_conv

from neurips25_core.testing import assert_close, randn

F64 = torch.float64


def _cache(n_layers=1):
    from transformers.cache_utils import Cache, LinearAttentionLayer

    return Cache(layers=[LinearAttentionLayer() for _ in range(n_layers)])


def _random_generator(block, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in (block.gen_down.weight, block.gen_up.weight):
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.2)


@pytest.mark.parametrize("cls", [JetBlock, GatedDeltaNetBlock])
def test_prefill_plus_decode_equals_full_forward(cls):
    torch.manual_seed(0)
    if cls is JetBlock:
        block = JetBlock(24, 3, 5, 8, generator_reduction=4, layer_idx=0, chunk_size=4).to(F64)
        _random_generator(block)
    else:
        block = cls(24, 3, 5, 7, layer_idx=0, chunk_size=4).to(F64)
    h = randn(2, 13, 24, dtype=F64)
    full, _ = block(h, None, None)
    cache = _cache()
    parts = [
        block(h[:, a:b], None, None, cache=cache)[0]
        for a, b in ((0, 6), (6, 8), (8, 9), (9, 10), (10, 13))
    ]
    assert_close(torch.cat(parts, 1), full, rtol=1e-12)


def test_left_padding_leaves_valid_outputs_unchanged():
    torch.manual_seed(1)
    block = JetBlock(16, 2, 4, 8, generator_reduction=4, chunk_size=4).to(F64)
    _random_generator(block, 1)
    h = randn(2, 9, 16, dtype=F64)
    ref, _ = block(h, None, None)
    pad = randn(2, 3, 16, seed=5, dtype=F64) * 100  # garbage at the pad positions
    mask = torch.cat([torch.zeros(2, 3), torch.ones(2, 9)], 1).long()
    out, _ = block(torch.cat([pad, h], 1), None, mask)
    assert_close(out[:, 3:], ref, rtol=1e-12)
    # NaN at pad positions (fully masked attention rows upstream) does not leak either
    out_nan, _ = block(torch.cat([pad * float("nan"), h], 1), None, mask)
    assert_close(out_nan[:, 3:], ref, rtol=1e-12)


def test_zero_generator_is_a_depthwise_conv_with_taps_b2():
    torch.manual_seed(2)
    block = JetBlock(16, 2, 4, 8, generator_reduction=4).to(F64)  # generator W₁ = W₂ = 0 at init
    h = randn(1, 7, 16, dtype=F64)
    W = block.conv_size
    taps = block.gen_up.bias.view(2 * 8, W)  # channel-major, tap fastest
    kernels = block._conv_kernels(h)
    assert torch.equal(kernels, taps.expand(1, 7, 16, W))
    x = block.v_proj(h)
    y, _ = dynamic_conv(x, kernels)
    conv = torch.nn.functional.conv1d(
        torch.nn.functional.pad(x.transpose(1, 2), (W - 1, 0)), taps[:, None, :], groups=16
    )  # cross-correlation: tap W−1 meets the current token
    assert_close(y, torch.nn.functional.silu(conv.transpose(1, 2)), rtol=1e-13)


def test_frozen_generator_ablation_and_init():
    block = JetBlock(16, 2, 4, 8, generator_reduction=4, freeze_generator=True)
    assert not block.gen_up.weight.requires_grad and not block.gen_down.weight.requires_grad
    assert block.gen_up.bias.requires_grad
    assert torch.isfinite(block.A_log).all()  # A drawn from U(0, 16) is clamped away from 0
    assert (torch.nn.functional.softplus(block.dt_bias) >= 1e-4 - 1e-7).all()
    qk = JetBlock(16, 2, 4, 8, generator_reduction=4, qk_conv=True)
    out, _ = qk(torch.randn(1, 5, 16), None, None)
    assert out.shape == (1, 5, 16)
    assert qk.state_bytes() > block.state_bytes()


def test_mamba2_block_runs_and_refuses_a_cache():
    block = Mamba2Block(16, 2, 8, 8)
    x = torch.randn(2, 10, 16, requires_grad=True)
    out, _ = block(x, None, None)
    out.sum().backward()
    assert out.shape == x.shape and x.grad is not None
    with pytest.raises(ValueError, match="cache"):
        block(x, None, None, cache=object())


def test_block_bad_input():
    with pytest.raises(ValueError, match="value_head_dim"):
        JetBlock(16, 2, 4, 96 * 2.6666666667)
    with pytest.raises(ValueError, match="generator_reduction"):
        JetBlock(16, 1, 4, 6, generator_reduction=4)
    with pytest.raises(ValueError, match="head_dim"):
        JetBlock(16, 2, 0, 8)
    with pytest.raises(ValueError, match="value_conv"):
        JetBlock(16, 2, 4, 8, value_conv="fixed")
    block = JetBlock(16, 2, 4, 8, generator_reduction=4, layer_idx=0)
    with pytest.raises(ValueError, match="attention_mask"):
        block(torch.randn(1, 3, 16), None, torch.ones(1, 1, 3))
    from transformers.cache_utils import Cache, DynamicLayer

    with pytest.raises(ValueError, match="hybrid_cache"):
        block(torch.randn(1, 3, 16), None, None, cache=Cache(layers=[DynamicLayer()]))
