"""Baselines: RTN-g128 and NF against torchao (skipped with a message when torchao is absent)."""

import pytest
import torch
from qpalette.baselines import (
    TORCHAO_MISSING,
    nf_levels,
    nf_quantize,
    rtn_quantize,
    torchao_available,
    torchao_nf4,
    torchao_rtn,
)

needs_torchao = pytest.mark.skipif(not torchao_available(), reason=TORCHAO_MISSING)


@needs_torchao
@pytest.mark.parametrize("bits", [2, 3, 4])
def test_rtn_matches_torchao(bits):
    w = torch.randn(48, 256, generator=torch.Generator().manual_seed(bits))
    ours, b = rtn_quantize(w, bits)
    assert b == bits + 16 / 128
    assert torch.equal(ours, torchao_rtn(w, bits))


@needs_torchao
def test_nf4_levels_and_error_match_torchao():
    # the levels are QLoRA's; torchao double-quantizes the scalers, so compare errors
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    d_ao, _ = torchao_nf4(w)
    d, _ = nf_quantize(w, 4)
    e_ao = float((d_ao - w).norm() / w.norm())
    e = float((d - w).norm() / w.norm())
    assert abs(e - e_ao) < 0.02 * e_ao  # torchao double-quantizes its scalers


def test_rtn_and_nf_shapes_and_errors():
    w = torch.randn(16, 256)
    for bits in (2, 3, 4):
        for sym in (True, False):
            d, _ = rtn_quantize(w, bits, symmetric=sym)
            assert d.shape == w.shape
    assert len(nf_levels(4)) == 16 and nf_levels(4)[0] == -1.0 and 0.0 in nf_levels(4)
    e3 = float((nf_quantize(w, 3)[0] - w).norm())
    e4 = float((nf_quantize(w, 4)[0] - w).norm())
    assert e4 < e3
    with pytest.raises(ValueError, match="group_size"):
        rtn_quantize(torch.randn(4, 100), 4)
    with pytest.raises(ValueError, match="bits"):
        rtn_quantize(w, 0)
