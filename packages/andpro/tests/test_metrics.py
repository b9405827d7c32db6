"""attention_output_error against direct computations."""

import pytest
import torch
from andpro.attention import masked_attention
from andpro.metrics import attention_output_error

from neurips25_core.testing import randn


def _data(seed=0, b=2, hq=4, hkv=2, q=5, t=30, d=8):
    return (
        randn(b, hq, q, d, seed=seed, dtype=torch.float64),
        randn(b, hkv, t, d, seed=seed + 1, dtype=torch.float64),
        randn(b, hkv, t, d, seed=seed + 2, dtype=torch.float64),
    )


def test_keep_all_is_zero_error():
    q, k, v = _data()
    keep = torch.ones(2, 2, 24, dtype=torch.bool)
    for norm in ("softmax", "none"):
        assert attention_output_error(q, k, v, keep, normalize=norm).abs().max() < 1e-14


def test_softmax_error_matches_masked_attention():
    q, k, v = _data(seed=3)
    length, total = 24, 30
    keep = torch.rand(2, 2, length, generator=torch.Generator().manual_seed(0)) > 0.5
    err = attention_output_error(q, k, v, keep)
    pos_q = torch.arange(total - 5, total)
    pos_k = torch.arange(total)
    causal = pos_k[None, :] <= pos_q[:, None]
    kept = torch.cat([keep, torch.ones(2, 2, total - length, dtype=torch.bool)], -1)
    full, _ = masked_attention(q, k, v, causal.expand(2, 2, 5, total), 8**-0.5, "eager")
    part, _ = masked_attention(q, k, v, causal & kept[:, :, None, :], 8**-0.5, "eager")
    diff = (full - part).transpose(1, 2)
    expect = diff.flatten(2).norm(dim=-1) / full.transpose(1, 2).flatten(2).norm(dim=-1)
    assert torch.allclose(err, expect, rtol=1e-12, atol=0)


def test_unnormalised_error_is_the_lost_mass_and_o_proj_per_head():
    q, k, v = _data(seed=5, b=1, hq=2, hkv=2, q=1, t=10, d=4)
    keep = torch.ones(1, 2, 10, dtype=torch.bool)
    keep[0, 0, 3] = False
    a = torch.softmax(
        (q @ k.transpose(-1, -2)) * 0.5, -1
    )  # single query at the last position sees all
    o = a @ v
    lost = a[0, 0, 0, 3] * v[0, 0, 3]
    err = attention_output_error(q, k, v, keep, normalize="none")
    assert err[0, 0].item() == pytest.approx((lost.norm() / o[0, 0, 0].norm()).item(), rel=1e-12)
    assert err[0, 1].item() == 0
    w = randn(6, 8, seed=9, dtype=torch.float64)
    err_o = attention_output_error(q, k, v, keep, normalize="none", o_proj=w)
    w0 = w[:, :4]
    assert err_o[0, 0].item() == pytest.approx(
        ((w0 @ lost).norm() / (w0 @ o[0, 0, 0]).norm()).item(), rel=1e-12
    )


def test_per_query_head_keep_and_errors():
    q, k, v = _data()
    keep_q = torch.ones(2, 4, 24, dtype=torch.bool)
    keep_q[:, 1, 5:10] = False
    err = attention_output_error(q, k, v, keep_q)
    assert (err[:, [0, 2, 3]] == 0).all() and (err[:, 1] > 0).all()
    with pytest.raises(ValueError, match="normalize"):
        attention_output_error(q, k, v, keep_q, normalize="l2")
    with pytest.raises(ValueError, match="keep"):
        attention_output_error(q, k, v, keep_q.float())
    with pytest.raises(ValueError, match="keep"):
        attention_output_error(q, k, v, torch.ones(2, 4, 40, dtype=torch.bool))
    with pytest.raises(TypeError, match="query"):
        attention_output_error(q.numpy(), k, v, keep_q)
