"""MLAAttention: decompressed forward = float64 reference; absorbed decode = decompressed decode;
the cache holds only the latents (r_kv + d_rope per token); bad input."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from xecomla import MLAAttention, MLAConfig
from xecomla.reference import mla_attention_ref

from neurips25_core.testing import assert_close, randn


def _layer(llama_config, cfg, seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    attn = MLAAttention(cfg, llama_config(**kw), layer_idx=0).to(dtype)
    for p in attn.parameters():  # the default init is too small to make the softmax non-trivial
        torch.nn.init.normal_(p, std=0.3)
    return attn


CONFIGS = [
    MLAConfig(r_q=20, r_kv=12, d_nope=6, d_rope=4, d_v=7),
    MLAConfig(r_q=13, r_kv=9, d_nope=8, d_rope=0, d_v=5),  # NoPE MLA
    MLAConfig(
        r_q=24,
        r_kv=16,
        d_nope=0,
        d_rope=8,
        d_v=8,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    ),
]


def _positions(B, T, start=0):
    return torch.arange(start, start + T).expand(B, T)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["rope", "nope", "yarn_no_nope"])
def test_forward_equals_reference_fp64(llama_config, cfg):
    attn = _layer(llama_config, cfg)
    x = randn(2, 11, 32, seed=1, dtype=torch.float64)
    out, _ = attn(x, None, None)
    ref = mla_attention_ref(attn, x, attn.rope_cos_sin(_positions(2, 11), x))
    assert_close(out, ref, rtol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["rope", "nope", "yarn_no_nope"])
def test_absorbed_decode_equals_decompressed_fp64(llama_config, cfg):
    """Prefill 7 tokens, then decode 4 one at a time: absorbed, decompressed and the reference agree."""
    x = randn(3, 11, 32, seed=2, dtype=torch.float64)
    outs = {}
    for absorb in (True, False):
        attn = _layer(llama_config, cfg)
        attn.absorb = absorb
        cache = DynamicCache()
        steps = [attn(x[:, :7], None, None, cache=cache)[0]]
        for t in range(7, 11):
            steps.append(attn(x[:, t : t + 1], None, None, cache=cache)[0])
        outs[absorb] = torch.cat(steps, dim=1)
    ref = mla_attention_ref(attn, x, attn.rope_cos_sin(_positions(3, 11), x))
    assert_close(outs[True], outs[False], rtol=1e-12)
    assert_close(outs[True], ref, rtol=1e-12)


def test_absorbed_multi_token_continuation_fp64(llama_config):
    """A 3-token chunk after a prefill goes through the absorbed path with its causal offset."""
    cfg = CONFIGS[0]
    attn = _layer(llama_config, cfg)
    x = randn(2, 9, 32, seed=3, dtype=torch.float64)
    cache = DynamicCache()
    a = attn(x[:, :6], None, None, cache=cache)[0]
    b = attn(x[:, 6:], None, None, cache=cache)[0]
    ref = mla_attention_ref(attn, x, attn.rope_cos_sin(_positions(2, 9), x))
    assert_close(torch.cat([a, b], dim=1), ref, rtol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["rope", "nope", "yarn_no_nope"])
def test_cache_holds_only_latents(llama_config, cfg):
    attn = _layer(llama_config, cfg, dtype=torch.float32)
    cache = DynamicCache()
    attn(torch.randn(2, 5, 32), None, None, cache=cache)
    attn(torch.randn(2, 1, 32), None, None, cache=cache)
    layer = cache.layers[0]
    assert layer.keys.shape == (2, 1, 6, cfg.r_kv)
    assert layer.values.shape == (2, 1, 6, cfg.d_rope)
    assert layer.keys.shape[-1] + layer.values.shape[-1] == cfg.cache_width == cfg.r_kv + cfg.d_rope


def test_cached_k_pe_is_rotated(llama_config):
    """The cache stores k_pe after RoPE: position 5's entry differs from the unrotated projection."""
    cfg = CONFIGS[0]
    attn = _layer(llama_config, cfg)
    x = randn(1, 6, 32, seed=4, dtype=torch.float64)
    cache = DynamicCache()
    attn(x, None, None, cache=cache)
    raw = (x @ attn.kv_a_proj.weight.T)[..., cfg.r_kv :]
    cos, sin = attn.rope_cos_sin(_positions(1, 6), x)
    rotated = raw * cos + torch.cat([-raw[..., 2:], raw[..., :2]], dim=-1) * sin
    assert_close(cache.layers[0].values[:, 0], rotated, rtol=1e-14)
    assert not torch.allclose(cache.layers[0].values[:, 0, 5], raw[:, 5])


def test_bad_input(llama_config):
    good = llama_config()
    with pytest.raises(ValueError, match="r_kv"):  # min(2·n_kv·d_h, d) = min(32, 32)
        MLAAttention(MLAConfig(r_q=8, r_kv=33, d_nope=4, d_rope=4, d_v=8), good, 0)
    with pytest.raises(ValueError, match="r_kv"):  # 2·n_kv·d_h = 16 < d = 32
        MLAAttention(
            MLAConfig(r_q=8, r_kv=17, d_nope=4, d_rope=4, d_v=8), llama_config(kv_heads=1), 0
        )
    with pytest.raises(ValueError, match="num_key_value_heads"):
        MLAAttention(
            MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=4, d_v=8),
            llama_config(heads=4, kv_heads=3, head_dim=8),
            0,
        )
    with pytest.raises(ValueError, match="d_rope"):
        MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=3, d_v=8)
    with pytest.raises(ValueError, match="r_kv"):
        MLAConfig(r_q=8, r_kv=0, d_nope=4, d_rope=4, d_v=8)
    with pytest.raises(TypeError, match="r_q"):
        MLAConfig(r_q=8.0, r_kv=8, d_nope=4, d_rope=4, d_v=8)
    with pytest.raises(TypeError, match="config"):
        MLAAttention({"r_q": 8}, good, 0)
    attn = MLAAttention(MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=4, d_v=8), good, 0)
    with pytest.raises(ValueError, match="hidden_states"):
        attn(torch.randn(2, 3, 31), None, None)
