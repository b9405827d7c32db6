"""HybridLayout checks, kv_cache_bytes (official ratios, the allocated cache), SMART/uniform placement."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from xecomla import (
    HybridLayout,
    MLAConfig,
    kv_cache_bytes,
    recurrent_state_bytes,
    smart_select,
    uniform_select,
)
from xecomla.init import mla_from_attention

# the official shapes: Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B and Zebra-Llama's MLA ranks / indices
OFFICIAL = {
    "1B": (
        dict(
            hidden_size=2048,
            num_attention_heads=32,
            num_key_value_heads=8,
            num_hidden_layers=16,
            head_dim=64,
        ),
        MLAConfig(1344, 128, 32, 32, 64),
        [0, 5, 10, 14],
        3.91,
    ),
    "3B": (
        dict(
            hidden_size=3072,
            num_attention_heads=24,
            num_key_value_heads=8,
            num_hidden_layers=28,
            head_dim=128,
        ),
        MLAConfig(1536, 128, 64, 64, 128),
        [0, 5, 10, 16, 21, 26],
        2.01,
    ),
    "8B": (
        dict(
            hidden_size=4096,
            num_attention_heads=32,
            num_key_value_heads=8,
            num_hidden_layers=32,
            head_dim=128,
        ),
        MLAConfig(2048, 160, 64, 64, 128),
        [0, 4, 8, 12, 16, 20, 25, 30],
        2.73,
    ),
}


@pytest.mark.parametrize("size", list(OFFICIAL))
def test_official_kv_ratios(size):
    shapes, mla, layers, percent = OFFICIAL[size]
    llama = LlamaConfig(intermediate_size=8192, **shapes)
    zebra = HybridLayout(llama, mla_layers=layers, mla_config=mla)
    ratio = kv_cache_bytes(zebra, 2048, torch.bfloat16) / kv_cache_bytes(
        llama, 2048, torch.bfloat16
    )
    assert round(100 * ratio, 2) == percent
    assert (
        kv_cache_bytes(llama, 1, torch.bfloat16)
        == shapes["num_hidden_layers"] * 2 * 8 * shapes["head_dim"] * 2
    )


def test_8b_readme_rank_128_does_not_give_2_73():
    shapes, _, layers, _ = OFFICIAL["8B"]
    llama = LlamaConfig(intermediate_size=8192, **shapes)
    zebra = HybridLayout(llama, mla_layers=layers, mla_config=MLAConfig(2048, 128, 64, 64, 128))
    assert round(100 * kv_cache_bytes(zebra, 1) / kv_cache_bytes(llama, 1), 2) == 2.34


def test_kv_cache_bytes_matches_the_allocated_cache(llama_config):
    """A Llama with layer 1 swapped for MLA: the DynamicCache's bytes after a forward = the formula."""
    cfg = llama_config(layers=3)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    mla_cfg = MLAConfig(r_q=16, r_kv=12, d_nope=4, d_rope=4, d_v=8)
    model.model.layers[1].self_attn = mla_from_attention(model.model.layers[1].self_attn, mla_cfg)
    cache = DynamicCache()
    B, T = 3, 7
    with torch.no_grad():
        model(torch.randint(0, 32, (B, T)), cache=cache, use_cache=True)
    allocated = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert allocated == B * kv_cache_bytes(model, T, torch.float32)
    assert kv_cache_bytes(model, 1, torch.float32) == 4 * (2 * 2 * 8 + (12 + 4) + 2 * 2 * 8)


def test_layout_kinds_and_recurrent_state(llama_config):
    cfg = llama_config(layers=8)
    layout = HybridLayout(
        cfg, mla_layers=[0, 4], mla_config=MLAConfig(16, 8, 4, 4, 8), gqa_layers=[2]
    )
    assert layout.kinds == ("mla", "mamba2", "gqa", "mamba2", "mla", "mamba2", "mamba2", "mamba2")
    assert layout.mamba_layers == (1, 3, 5, 6, 7)
    # n_h·d_h² + 4·(n_h·d_h + 2·n_kv·d_h) = 4·64 + 4·(32 + 32) per Mamba2 layer
    assert recurrent_state_bytes(layout, torch.float32) == 5 * (4 * 64 + 4 * 64) * 4
    assert kv_cache_bytes(layout, 10, torch.float32) == 10 * 4 * (
        2 * (8 + 4) + 2 * 2 * 8
    )  # 2 MLA + 1 GQA


def test_layout_bad_input(llama_config):
    cfg = llama_config(layers=4)
    m = MLAConfig(16, 8, 4, 4, 8)
    with pytest.raises(ValueError, match="mla_layers: duplicate"):
        HybridLayout(cfg, mla_layers=[0, 0], mla_config=m)
    with pytest.raises(ValueError, match="mla_layers: layer 4 is out of range"):
        HybridLayout(cfg, mla_layers=[4], mla_config=m)
    with pytest.raises(ValueError, match="gqa_layers: layer -1"):
        HybridLayout(cfg, mla_layers=[0], mla_config=m, gqa_layers=[-1])
    with pytest.raises(ValueError, match="overlapping"):
        HybridLayout(cfg, mla_layers=[0, 2], mla_config=m, gqa_layers=[2])
    with pytest.raises(ValueError, match="mamba_layers: layers \\[0\\]"):
        HybridLayout(cfg, mla_layers=[0], mla_config=m, mamba_layers=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="in no list"):
        HybridLayout(cfg, mla_layers=[0], mla_config=m, mamba_layers=[1, 2])
    with pytest.raises(TypeError, match="mla_config"):
        HybridLayout(cfg, mla_layers=[0])
    with pytest.raises(ValueError, match="num_key_value_heads"):
        HybridLayout(llama_config(heads=4, kv_heads=3, head_dim=8), mla_layers=[0], mla_config=m)
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(cfg, -1)
    with pytest.raises(TypeError, match="dtype"):
        kv_cache_bytes(cfg, 4, "bf16")
    with pytest.raises(TypeError, match="model_or_config"):
        kv_cache_bytes(object(), 4)


def test_smart_select_segments_and_ties():
    s = [9.0, 1, 3, 2, 5, 5, 1, 0]
    assert smart_select(s, 2) == [0, 4]  # [0..3] -> 0 (fixed), [4..7] -> 4 (tie with 5: lower)
    assert smart_select(s, 4) == [0, 2, 4, 6]  # [0,1] [2,3] [4,5] [6,7]
    assert smart_select(s, 1) == [0]
    # 28 layers into 6 segments: sizes 5,5,5,5,4,4; the official 3B indices are one per segment
    s28 = torch.zeros(28)
    s28[[5, 10, 16, 21, 26]] = 1.0
    assert smart_select(s28, 6) == [0, 5, 10, 16, 21, 26]
    # layer 0 is kept even when it is the least sensitive; a segment's own max wins elsewhere
    s16 = torch.arange(16.0)
    out = smart_select(s16, 4)
    assert out == [0, 7, 11, 15] and len(out) == 4
    assert smart_select(torch.ones(5), 5) == [0, 1, 2, 3, 4]  # all ties: one per segment


def test_uniform_select():
    assert uniform_select(8, 2) == [0, 4]
    assert uniform_select(8, 4) == [0, 2, 4, 6]
    assert uniform_select(28, 6) == [0, 4, 9, 14, 18, 23]
    assert uniform_select(5, 5) == [0, 1, 2, 3, 4]


def test_select_bad_input():
    with pytest.raises(ValueError, match="n_mla"):
        smart_select([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="n_mla"):
        uniform_select(4, 0)
    with pytest.raises(TypeError, match="n_mla"):
        uniform_select(4, 1.5)
    with pytest.raises(ValueError, match="sensitivity"):
        smart_select([[1.0, 2.0]], 1)
    with pytest.raises(ValueError, match="sensitivity"):
        smart_select([1.0, float("nan")], 1)
    with pytest.raises(ValueError, match="num_layers"):
        uniform_select(0, 1)
