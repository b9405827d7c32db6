"""Codebooks, the trellis hash and the rotation."""

import math

import pytest
import torch
from qpalette.codebooks import (
    TAU_STD,
    gaussian_vq,
    lloyd_max_gaussian,
    lloyd_max_mse,
    trellis_hash,
    trellis_lut,
    trellis_tau,
)
from qpalette.rotation import (
    hadamard_transform,
    inverse_hadamard_transform,
    random_signs,
    rotate_weight,
    unrotate_weight,
)

from neurips25_core.testing import assert_close


@pytest.mark.parametrize(("bits", "mse"), [(1, 0.3634), (2, 0.1175), (3, 0.03454), (4, 0.009497)])
def test_lloyd_max_mse_matches_the_known_values(bits, mse):
    levels = lloyd_max_gaussian(bits)
    assert levels.shape == (2**bits,)
    assert torch.all(levels[1:] > levels[:-1])
    assert_close(levels, -levels.flip(0), rtol=1e-12)  # symmetric
    assert abs(lloyd_max_mse(levels) / mse - 1) < 0.01


def test_lloyd_max_mse_against_monte_carlo():
    levels = lloyd_max_gaussian(3)
    x = torch.randn(400_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    q = levels[torch.bucketize(x, 0.5 * (levels[1:] + levels[:-1]))]
    assert abs(float((q - x).square().mean()) / lloyd_max_mse(levels) - 1) < 0.01


def test_lloyd_max_rejects_bad_bits():
    with pytest.raises(ValueError, match="bits"):
        lloyd_max_gaussian(0)
    with pytest.raises(TypeError, match="bits"):
        lloyd_max_gaussian(2.5)


def test_gaussian_vq_error_is_near_the_official_table():
    x = torch.randn(100_000, 2, generator=torch.Generator().manual_seed(1))
    for bits, official in [(2, 0.1086), (3, 0.0297)]:
        cb = gaussian_vq(bits)
        assert cb.shape == (2 ** (2 * bits), 2)
        err = float(torch.cdist(x, cb).min(1).values.square().mean() / 2)
        assert abs(err / official - 1) < 0.05, (bits, err)
    with pytest.raises(ValueError, match="bits"):
        gaussian_vq(1.25)


def test_trellis_tau_is_rescaled():
    tau = trellis_tau(9)
    assert tau.shape == (512, 2)
    assert abs(float(tau.std(unbiased=False)) - TAU_STD) < 1e-5


def test_hash_by_hand():
    # s = 0: h = 0; s = 1: h = 2; s = 255: h = 65280 = 0xFF00 (bit 15 set, (h >> 6) & 511 = 508);
    # s = 65535: h = 65535·65536 ≡ 0 (mod 2**16).
    idx, sign = trellis_hash(torch.tensor([0, 1, 255, 65535]), 9)
    assert idx.tolist() == [0, 0, 508, 0]
    assert sign.tolist() == [1, 1, -1, 1]
    tau = trellis_tau(9)
    lut = trellis_lut(16, 9, tau)
    assert lut.shape == (65536, 2)
    assert torch.equal(lut[255], torch.stack([-tau[508, 0], tau[508, 1]]))  # only coord 0 flips
    assert torch.equal(lut[65535], tau[0])
    assert torch.equal(lut[1], tau[0])


def test_trellis_lut_rejects_a_bad_tau():
    with pytest.raises(ValueError, match="tau"):
        trellis_lut(8, 9, torch.zeros(10, 2))


@pytest.mark.parametrize("n", [16, 64, 96, 48])
def test_hadamard_is_orthonormal_and_inverts(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(5, n, generator=g, dtype=torch.float64)
    s = random_signs(n, seed=3, dtype=torch.float64)
    y = hadamard_transform(x, s)
    assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-12)
    assert_close(inverse_hadamard_transform(y, s), x, rtol=1e-12)
    w = torch.randn(7, n, generator=g, dtype=torch.float64)
    assert_close(rotate_weight(w, s) @ y.T, w @ x.T, rtol=1e-12)
    assert_close(unrotate_weight(rotate_weight(w, s), s), w, rtol=1e-12)


def test_hadamard_power_of_two_is_sylvester():
    from scipy.linalg import hadamard

    h = torch.tensor(hadamard(32), dtype=torch.float64) / math.sqrt(32)
    x = torch.randn(3, 32, dtype=torch.float64)
    assert_close(hadamard_transform(x), x @ h.T, rtol=1e-12)


@pytest.mark.parametrize("n", [2, 64, 512, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hadamard_dense_and_butterfly_paths_agree(n, dtype):
    # n <= 512 multiplies by the cached dense H/√n; 1024 runs the butterfly stages
    from scipy.linalg import hadamard

    h = torch.tensor(hadamard(n), dtype=torch.float64) / math.sqrt(n)
    x = torch.randn(3, 2, n, generator=torch.Generator().manual_seed(n), dtype=dtype)
    y = hadamard_transform(x, backend="torch")
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, x.double() @ h.T, rtol=1e-6 if dtype == torch.float32 else 1e-12)


def test_rotation_gaussianises_heavy_rows():
    g = torch.Generator().manual_seed(0)
    w = torch.zeros(64, 256)
    w[:, :4] = torch.randn(64, 4, generator=g) * 10  # outlier columns
    wr = rotate_weight(w, random_signs(256, 0))
    kurt = lambda t: float((t**4).mean() / (t**2).mean() ** 2)  # noqa: E731
    assert kurt(w) > 30 and kurt(wr) < 4


def test_signs_shape_is_checked():
    with pytest.raises(ValueError, match="signs"):
        hadamard_transform(torch.zeros(2, 8), torch.ones(4))
