"""Triton absorbed-MLA decode (under TRITON_INTERPRET=1 on CPU) against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from xecomla.ops import mla_decode

from neurips25_core.testing import assert_close, randn

triton = pytest.importorskip("triton", reason="triton is not installed (Linux only)")


@pytest.mark.parametrize(("S", "P", "splits"), [(37, 8, None), (70, 0, 3), (45, 6, 4)])
def test_triton_decode_matches_reference(S, P, splits):
    B, H, R = 2, 3, 12  # odd, non-power-of-two widths
    q, qpe = randn(B, H, R, seed=1), randn(B, H, P, seed=2)
    c, k = randn(B, S, R, seed=3), randn(B, S, P, seed=4)
    ref = mla_decode(q, qpe, c, k, 0.3, backend="reference")
    if splits is None:
        out = mla_decode(q, qpe, c, k, 0.3, backend="triton")
    else:
        from xecomla.kernels.mla_decode import mla_decode_triton

        out = mla_decode_triton(q, qpe, c, k, 0.3, n_splits=splits)
    assert out.dtype == torch.float32
    assert_close(out, ref, rtol=1e-5)
    assert_close(mla_decode(q, qpe, c, k, 0.3, backend="torch"), ref, rtol=1e-5)


def test_strided_cache_views():
    """A DynamicLayer's [B, 1, S, R] cache sliced to [B, S, R] (non-contiguous q too)."""
    c4, k4 = randn(2, 1, 20, 10, seed=5), randn(2, 1, 20, 4, seed=6)
    q = randn(2, 10, 3, seed=7).transpose(1, 2)
    qpe = randn(2, 3, 4, seed=8)
    ref = mla_decode(q, qpe, c4[:, 0], k4[:, 0], 0.5, backend="reference")
    assert_close(mla_decode(q, qpe, c4[:, 0], k4[:, 0], 0.5, backend="triton"), ref, rtol=1e-5)


def test_bad_input():
    q, c = torch.randn(1, 2, 4), torch.randn(1, 5, 4)
    z2, z5 = torch.zeros(1, 2, 0), torch.zeros(1, 5, 0)
    with pytest.raises(ValueError, match="backend"):
        mla_decode(q, z2, c, z5, 1.0, backend="cuda")
    with pytest.raises(ValueError, match="c_kv"):
        mla_decode(q, z2, torch.randn(1, 5, 3), z5, 1.0)
    with pytest.raises(ValueError, match="q_pe, k_pe"):
        mla_decode(q, torch.zeros(1, 2, 2), c, z5, 1.0)
    with pytest.raises(ValueError, match="q_abs"):
        mla_decode(q[0], z2, c, z5, 1.0)


def test_layer_decode_with_the_triton_backend():
    """MLAAttention's one-token absorbed decode through the kernel equals the torch path (fp32)."""
    from transformers import DynamicCache, LlamaConfig
    from xecomla import MLAAttention, MLAConfig

    llama = LlamaConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        intermediate_size=64,
        vocab_size=16,
    )
    outs = {}
    for backend in ("torch", "triton"):
        torch.manual_seed(0)
        attn = MLAAttention(
            MLAConfig(r_q=16, r_kv=12, d_nope=4, d_rope=4, d_v=8), llama, 0, backend=backend
        )
        cache = DynamicCache()
        x = randn(2, 9, 32, seed=9)
        steps = [attn(x[:, :6], None, None, cache=cache)[0]]
        steps += [attn(x[:, t : t + 1], None, None, cache=cache)[0] for t in range(6, 9)]
        outs[backend] = torch.cat(steps, dim=1)
    assert_close(outs["triton"], outs["torch"], rtol=1e-5)
