"""Mamba2FromAttention: chunked = sequential (fp64), step = forward, GQA-style grouping, init copies."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaAttention
from xecomla import Mamba2FromAttention
from xecomla.init import mamba_from_attention
from xecomla.mamba2 import ssd_chunked

from neurips25_core.testing import assert_close, randn


def _layer(llama_config, chunk_size=4, seed=0, **kw):
    torch.manual_seed(seed)
    layer = Mamba2FromAttention(llama_config(**kw), 0, chunk_size=chunk_size).double()
    with torch.no_grad():  # make every part matter: non-trivial norm weights, D and dt
        layer.norm_weight.normal_(1.0, 0.3)
        layer.D.normal_(1.0, 0.3)
        layer.in_proj.weight.mul_(3.0)
    return layer


@pytest.mark.parametrize("T", [1, 3, 4, 11])  # T < chunk, = chunk, odd T over several chunks
def test_chunked_equals_sequential_fp64(llama_config, T):
    layer = _layer(llama_config)
    x = randn(2, T, 32, seed=T, dtype=torch.float64)
    out, _ = layer(x)
    assert_close(out, layer.reference(x), rtol=1e-12)


def test_chunk_size_does_not_matter_fp64(llama_config):
    x = randn(2, 13, 32, seed=5, dtype=torch.float64)
    outs = [_layer(llama_config, chunk_size=q)(x)[0] for q in (1, 5, 64)]
    assert_close(outs[0], outs[1], rtol=1e-12)
    assert_close(outs[0], outs[2], rtol=1e-12)


def test_ssd_chunked_continues_a_state_fp64():
    b, T, H, P, N = 2, 9, 3, 4, 5
    x, B, C = (randn(b, T, H, k, seed=s, dtype=torch.float64) for s, k in ((1, P), (2, N), (3, N)))
    dt = torch.nn.functional.softplus(randn(b, T, H, seed=4, dtype=torch.float64))
    A = -torch.rand(H, dtype=torch.float64) - 0.1
    y, state = ssd_chunked(x, dt, A, B, C, chunk_size=4)
    y1, s1 = ssd_chunked(x[:, :5], dt[:, :5], A, B[:, :5], C[:, :5], chunk_size=3)
    y2, s2 = ssd_chunked(x[:, 5:], dt[:, 5:], A, B[:, 5:], C[:, 5:], chunk_size=3, initial_state=s1)
    assert_close(torch.cat([y1, y2], 1), y, rtol=1e-12)
    assert_close(s2, state, rtol=1e-12)


def test_step_equals_forward_fp64(llama_config):
    """Prefill 6 tokens with mix(), then step 5 tokens: every output equals the full forward's."""
    layer = _layer(llama_config)
    x = randn(2, 11, 32, seed=7, dtype=torch.float64)
    full, _ = layer(x)
    out, _, conv_state, ssm_state = layer.mix(x[:, :6])
    steps = [out]
    for t in range(6, 11):
        o, conv_state, ssm_state = layer.step(x[:, t], conv_state, ssm_state)
        steps.append(o[:, None])
    assert_close(torch.cat(steps, 1), full, rtol=1e-12)
    conv0, ssm0 = layer.initial_states(2)  # stepping from zero states is the forward too
    o, _, _ = layer.step(x[:, 0], conv0, ssm0)
    assert_close(o, full[:, 0], rtol=1e-12)


def test_head_reads_group_h_times_nkv_over_nh(llama_config):
    """Perturb the x rows of one group: exactly the heads h with ⌊h·n_kv/n_h⌋ = g change."""
    layer = _layer(llama_config, heads=8, kv_heads=2, head_dim=4)
    assert layer.group_of_head.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    x = randn(1, 5, 32, seed=8, dtype=torch.float64)
    y0 = layer.mix(x)[1]
    for g in range(2):
        pert = _layer(llama_config, heads=8, kv_heads=2, head_dim=4)
        with torch.no_grad():
            start = pert.d_inner + g * pert.head_dim  # x rows of group g
            pert.in_proj.weight[start : start + pert.head_dim] += 1.0
        changed = (pert.mix(x)[1] - y0).abs().amax(dim=(0, 1, 3)) > 0
        assert changed.tolist() == [h * 2 // 8 == g for h in range(8)]


def test_init_copies_v_k_q_bit_for_bit(llama_config):
    cfg = llama_config(heads=4, kv_heads=2)
    torch.manual_seed(1)
    attn = LlamaAttention(cfg, 0)
    torch.manual_seed(2)
    random = mamba_from_attention(attn, init="random")
    torch.manual_seed(2)
    mamba = mamba_from_attention(attn)
    w, di, dxb = mamba.in_proj.weight, mamba.d_inner, mamba.d_xb
    assert torch.equal(w[di : di + dxb], attn.v_proj.weight)
    assert torch.equal(w[di + dxb : di + 2 * dxb], attn.k_proj.weight)
    assert torch.equal(w[di + 2 * dxb : 2 * di + 2 * dxb], attn.q_proj.weight)
    assert torch.equal(mamba.out_proj.weight, attn.o_proj.weight)
    # z and dt rows, the conv and the SSM parameters are the random init, unchanged
    assert torch.equal(w[:di], random.in_proj.weight[:di]) and torch.equal(
        w[-4:], random.in_proj.weight[-4:]
    )
    assert torch.equal(mamba.conv1d.weight, random.conv1d.weight) and torch.equal(
        mamba.A_log, random.A_log
    )
    assert not torch.equal(random.in_proj.weight[di : di + dxb], attn.v_proj.weight)


def test_ssm_parameter_init(llama_config):
    torch.manual_seed(0)
    layer = Mamba2FromAttention(llama_config(heads=8, kv_heads=2, head_dim=4), 0)
    A = layer.A_log.exp()
    assert bool(((A >= 1) & (A <= 16)).all())
    dt = torch.nn.functional.softplus(layer.dt_bias)
    assert bool(((dt >= 1e-4 - 1e-9) & (dt <= 1e-1 + 1e-7)).all())
    assert torch.equal(layer.D, torch.ones(8))


def test_bad_input(llama_config):
    layer = Mamba2FromAttention(llama_config(), 0)
    with pytest.raises(ValueError, match="hidden_states"):
        layer(torch.randn(2, 3, 31))
    with pytest.raises(ValueError, match="cache"):
        layer(torch.randn(2, 3, 32), cache=object())
    conv, ssm = layer.initial_states(2)
    with pytest.raises(ValueError, match="conv_state"):
        layer.step(torch.randn(2, 32), conv[:, :-1], ssm)
    with pytest.raises(ValueError, match="ssm_state"):
        layer.step(torch.randn(2, 32), conv, ssm[:1])
    with pytest.raises(ValueError, match="num_key_value_heads"):
        Mamba2FromAttention(llama_config(heads=4, kv_heads=3, head_dim=8), 0)
    with pytest.raises(ValueError, match="d_conv"):
        Mamba2FromAttention(llama_config(), 0, d_conv=0)
    with pytest.raises(ValueError, match="init"):
        mamba_from_attention(LlamaAttention(llama_config(), 0), init="svd")
