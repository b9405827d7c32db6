"""The float64 references agree with each other, and the format conversions round-trip."""

import pytest
import torch
from codegemm.format import (
    from_aqlm,
    from_official,
    pack_codes_official,
    to_aqlm,
    to_official,
    unpack_codes_official,
)
from codegemm.reference import (
    codebook_matmul_reference,
    dequantize_reference,
    psumbook_matmul_reference,
    psumbook_reference,
    round_to_nearest_reference,
)

from neurips25_core.testing import assert_close, randn

from .helpers import random_format


@pytest.mark.parametrize(("m", "v", "bits", "g"), [(1, 4, 8, 32), (2, 8, 8, 64), (2, 4, 4, 128)])
@pytest.mark.parametrize("n", [1, 3])
def test_psumbook_identity_float64(m, v, bits, g, n):
    """y[n,r] = Σ_j s[r,G(j)] Σ_k P[n,j,k,codes[r,j,k]] equals x Ŵᵀ (the method's identity)."""
    codes, books, scales = random_format(13, 128, m, v, bits, g, seed=3)
    x = randn(n, 128, seed=4, dtype=torch.float64)
    assert_close(
        psumbook_matmul_reference(x, codes, books, scales),
        codebook_matmul_reference(x, codes, books, scales),
    )


def test_dequantize_reference_by_hand():
    codes = torch.tensor([[[1, 0], [0, 1]]], dtype=torch.uint8)  # M=1, K/v=2, m=2
    books = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[10.0, 20.0], [30.0, 40.0]]])  # m=2, C=2, v=2
    scales = torch.tensor([[2.0, -1.0]])  # g=2
    w = dequantize_reference(codes, books, scales)
    expected = torch.tensor(
        [[2 * (3 + 10), 2 * (4 + 20), -(1 + 30), -(2 + 40)]], dtype=torch.float64
    )
    assert torch.equal(w, expected)


def test_psumbook_table_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    books = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # m=1, C=3, v=2
    table = psumbook_reference(x, books)
    assert table.shape == (1, 2, 1, 3)
    assert torch.equal(
        table[0, :, 0], torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 7.0]], dtype=torch.float64)
    )


def test_official_packing_is_lsb_first():
    codes = torch.tensor([[[1], [2], [3], [4]]], dtype=torch.uint8)  # M=1, K/v=4, m=1
    packed = pack_codes_official(codes)
    assert packed.shape == (1, 1, 1)
    assert int(packed[0, 0, 0]) == 1 | (2 << 8) | (3 << 16) | (4 << 24)
    high = torch.tensor([[[255], [0], [0], [128]]], dtype=torch.uint8)
    assert int(pack_codes_official(high)[0, 0, 0]) == 255 | (128 << 24) - (1 << 32)
    assert torch.equal(unpack_codes_official(pack_codes_official(high)), high)


def test_official_and_aqlm_round_trips():
    codes, books, scales = random_format(6, 64, 2, 8, 8, 32, seed=1)
    packed, books16, scales_t = to_official(codes, books, scales)
    assert packed.dtype == torch.int32 and packed.shape == (2, 64 // 8 // 4, 6)
    assert scales_t.shape == (2, 6) and books16.dtype == torch.float16
    back, _, back_scales = from_official(packed, books16, scales_t)
    assert torch.equal(back, codes)
    assert torch.equal(back_scales, scales.half())
    # AQLM: one scale per output channel (g = K), signed int8 codes read modulo 2^b.
    per_row = scales[:, :1].contiguous()
    signed, aqlm_books, aqlm_scales = to_aqlm(codes, books, per_row)
    assert (
        signed.dtype == torch.int8
        and aqlm_books.shape == (2, 256, 1, 8)
        and aqlm_scales.shape == (6, 1, 1, 1)
    )
    c2, b2, s2 = from_aqlm(signed, aqlm_books, aqlm_scales)
    assert torch.equal(c2, codes) and torch.equal(b2, books) and torch.equal(s2, per_row)
    with pytest.raises(ValueError, match="scales"):
        to_aqlm(codes, books, scales)


def test_rtn_reference_levels():
    w = randn(8, 256, seed=0, dtype=torch.float64)
    q = round_to_nearest_reference(w, bits=2, group_size=128)
    for group in q.view(8, 2, 128).unbind(1):
        for row in group:
            assert row.unique().numel() <= 4
    err = ((q - w).norm() / w.norm()).item()
    assert 0.4 < err < 0.6  # 4 min-max levels on Gaussian groups of 128 (spec §5: 0.501)
