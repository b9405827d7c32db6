"""SVD init of MLA from a Llama attention (the issue's Done-when points) and energy ranks."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaAttention
from xecomla import MLAConfig
from xecomla.init import energy_rank, mla_from_attention

from neurips25_core.testing import assert_close, randn


def _attention(llama_config, seed=0, **kw):
    cfg = llama_config(**kw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    attn = LlamaAttention(cfg, layer_idx=0).double()
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return attn


def _full_rank_config(d_h=8, n_kv=2, n_h=4, d=32):
    return MLAConfig(
        r_q=min(n_h * d_h, d), r_kv=min(2 * n_kv * d_h, d), d_nope=d_h, d_rope=0, d_v=d_h
    )


def _reconstruct_kv(mla, n_kv, d_h, d_nope):
    """[W_k(nope rows); W_v] per head from W_kvB·W_kvA, in M's row order (key block, value block)."""
    prod = (mla.kv_b_proj.weight @ mla.kv_a_proj.weight[: mla.mla_config.r_kv]).reshape(
        n_kv, d_nope + d_h, -1
    )
    return prod[:, :d_nope], prod[:, d_nope:]


def test_full_rank_nope_reproduces_w_k_w_v(llama_config):
    attn = _attention(llama_config)
    mla = mla_from_attention(attn, _full_rank_config())
    k, v = _reconstruct_kv(mla, 2, 8, 8)
    assert_close(k.reshape(16, 32), attn.k_proj.weight, rtol=1e-10)
    assert_close(v.reshape(16, 32), attn.v_proj.weight, rtol=1e-10)
    assert_close(mla.q_b_proj.weight @ mla.q_a_proj.weight, attn.q_proj.weight, rtol=1e-10)
    assert torch.equal(mla.o_proj.weight, attn.o_proj.weight)


def test_full_rank_nope_mla_equals_the_attention(llama_config):
    """d_rope = 0 and no RoPE on the Llama side (cos = 1, sin = 0): the MLA core is the attention."""
    attn = _attention(llama_config)
    mla = mla_from_attention(attn, _full_rank_config())
    x = randn(2, 9, 32, seed=1, dtype=torch.float64)
    identity = (torch.ones(2, 9, 8, dtype=torch.float64), torch.zeros(2, 9, 8, dtype=torch.float64))
    want, _ = attn(x, identity, None)
    got, _ = mla(x, None, None)
    assert_close(got, want, rtol=1e-10)


@pytest.mark.parametrize("r", [1, 5, 13, 24])
def test_rank_r_error_is_the_tail_of_sigma(llama_config, r):
    """‖M − W_kvB·W_kvA‖_F = sqrt(Σ_{i>r} σ_i²) (Eckart–Young), with d_nope = d_h keeping every key row."""
    attn = _attention(llama_config, seed=2)
    mla = mla_from_attention(
        attn, MLAConfig(r_q=32, r_kv=r, d_nope=8, d_rope=0, d_v=8)
    ).requires_grad_(False)
    k, v = _reconstruct_kv(mla, 2, 8, 8)
    m = torch.cat([attn.k_proj.weight, attn.v_proj.weight])
    err = torch.linalg.matrix_norm(m.detach() - torch.cat([k.reshape(16, 32), v.reshape(16, 32)]))
    s = torch.linalg.svdvals(m.detach())
    assert math.isclose(
        float(err), float(s[r:].square().sum().sqrt()), rel_tol=1e-10, abs_tol=1e-12
    )


def test_rope_rows_are_the_head_mean_of_w_k(llama_config):
    """With d_rope > 0: the k_pe rows of W_kvA are the KV-head mean of W_k's last d_rope rows,
    permuted interleaved → half-split; k_nope/v still come from the joint SVD."""
    attn = _attention(llama_config, seed=3)
    mla = mla_from_attention(attn, MLAConfig(r_q=32, r_kv=32, d_nope=4, d_rope=4, d_v=8))
    k_mean = attn.k_proj.weight.reshape(2, 8, 32).mean(0)[4:]
    assert_close(mla.kv_a_proj.weight[32:], k_mean[[0, 2, 1, 3]], rtol=1e-14)
    k, v = _reconstruct_kv(mla, 2, 8, 4)
    assert_close(v.reshape(16, 32), attn.v_proj.weight, rtol=1e-10)
    assert_close(k, attn.k_proj.weight.reshape(2, 8, 32)[:, :4], rtol=1e-10)


def test_energy_rank_hand_made_sigma():
    s = torch.tensor(
        [50.0, 30.0, 10.0, 5.0, 3.0, 2.0], dtype=torch.float64
    ).sqrt()  # σ² sums to 100
    assert energy_rank(s, 0.9, multiple=1) == 3  # 50 + 30 + 10 = 90 ≤ 90%
    assert energy_rank(s, 0.89, multiple=1) == 2
    assert energy_rank(s, 0.4, multiple=1) == 1  # none ≤ 40%: at least 1
    assert energy_rank(s, 1.0, multiple=1) == 6
    assert energy_rank(s, 0.9, max_rank=64) == 8  # round-up to a multiple of 8
    assert energy_rank(s, 0.9) == 6  # ... capped at the number of singular values
    flat = torch.ones(40, dtype=torch.float64)  # cumulative energy i/40
    assert energy_rank(flat, 0.225) == 16  # 9 ≤ 22.5% -> up to 16
    assert energy_rank(flat, 0.2) == 8  # 8
    assert energy_rank(flat, 0.175) == 8  # 7 -> 8
    assert energy_rank(flat.flip(0) * torch.arange(40, 0, -1), 1.0) == 40  # order does not matter


def test_rank_energy_sets_both_ranks(llama_config):
    attn = _attention(llama_config, seed=4)
    mla = mla_from_attention(
        attn, MLAConfig(r_q=8, r_kv=8, d_nope=8, d_rope=0, d_v=8), rank_energy=0.5
    )
    s_kv = torch.linalg.svdvals(torch.cat([attn.k_proj.weight, attn.v_proj.weight]))
    assert mla.mla_config.r_kv == energy_rank(s_kv, 0.5, max_rank=32)
    assert mla.mla_config.r_q == energy_rank(
        torch.linalg.svdvals(attn.q_proj.weight), 0.5, max_rank=32
    )
    assert mla.mla_config.r_kv % 8 == 0


def test_random_init_has_the_shapes_and_no_copy(llama_config):
    attn = _attention(llama_config)
    torch.manual_seed(0)
    mla = mla_from_attention(
        attn, MLAConfig(r_q=12, r_kv=8, d_nope=3, d_rope=2, d_v=5), init="random"
    )
    assert mla.kv_a_proj.weight.shape == (10, 32) and mla.kv_b_proj.weight.shape == (2 * 8, 8)
    assert mla.o_proj.weight.shape == (32, 20)
    assert mla.o_proj.weight.dtype == torch.float64


def test_bad_input(llama_config):
    attn = _attention(llama_config)
    with pytest.raises(ValueError, match="d_nope, d_rope"):
        mla_from_attention(attn, MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=2, d_v=8))
    with pytest.raises(ValueError, match="d_v"):
        mla_from_attention(attn, MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=4, d_v=6))
    with pytest.raises(ValueError, match="r_kv"):
        mla_from_attention(attn, MLAConfig(r_q=8, r_kv=40, d_nope=4, d_rope=4, d_v=8))
    with pytest.raises(ValueError, match="r_q"):
        mla_from_attention(attn, MLAConfig(r_q=40, r_kv=8, d_nope=4, d_rope=4, d_v=8))
    with pytest.raises(ValueError, match="init"):
        mla_from_attention(attn, MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=4, d_v=8), init="zeros")
    with pytest.raises(ValueError, match="rank_energy"):
        mla_from_attention(
            attn, MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=4, d_v=8), rank_energy=1.5
        )
    with pytest.raises(TypeError, match="attn"):
        mla_from_attention(
            torch.nn.Linear(3, 3), MLAConfig(r_q=8, r_kv=8, d_nope=4, d_rope=4, d_v=8)
        )
    with pytest.raises(ValueError, match="tau"):
        energy_rank(torch.ones(3), 0.0)
    with pytest.raises(ValueError, match="singular_values"):
        energy_rank(torch.tensor([1.0, -1.0]), 0.5)
