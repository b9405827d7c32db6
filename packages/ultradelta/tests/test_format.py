"""Packed format round trips, refusal of foreign bytes, and the fused decode-and-add."""

import numpy as np
import pytest
import torch
from ultradelta import (
    CompressedDelta,
    UltraDeltaConfig,
    apply_compressed,
    compress,
    to_device_format,
)
from ultradelta.baselines import dare
from ultradelta.packed import rice_decode, rice_encode

from neurips25_core.testing import poisoned_empty, randn


def _tasks():
    return [
        {
            "a.w": randn(33, 47, seed=1),
            "b.w": randn(20, 9, seed=2) * 5,
            "c": randn(3, 5, 7, seed=3),
        },
        {
            "a.w": randn(33, 47, seed=4) * 2,
            "b.w": randn(20, 9, seed=5),
            "c": randn(3, 5, 7, seed=6),
        },
    ]


def test_rice_round_trip():
    gaps = np.random.default_rng(0).geometric(0.03, 5000) - 1
    k, u, r = rice_encode(gaps)
    assert np.array_equal(rice_decode(k, u, r, gaps.size), gaps)
    # within 3% of the geometric source's entropy per symbol
    p = 0.03
    h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p)) / p
    assert 8 * (len(u) + len(r)) / gaps.size < 1.03 * h + 0.1


@pytest.mark.parametrize(
    "cfg",
    [
        UltraDeltaConfig(),
        UltraDeltaConfig(bits=1, sparsity=0.5, step=0.0),
        UltraDeltaConfig(quantize=False, sparsity=0.9),
    ],
)
def test_serialize_round_trip_exact(cfg):
    for c in compress(_tasks(), cfg):
        back = CompressedDelta.deserialize(c.serialize())
        assert back.config == c.config
        for k, v in c.to_dense().items():
            assert torch.equal(back.to_dense()[k], v)
    sparse = dare(_tasks()[0], 0.95, torch.Generator().manual_seed(0))
    back = CompressedDelta.deserialize(sparse.serialize())
    for k, v in sparse.to_dense().items():
        assert torch.equal(back.to_dense()[k], v)


def test_deserialize_refuses_foreign_or_truncated():
    blob = compress(_tasks())[0].serialize()
    with pytest.raises(ValueError, match="data"):
        CompressedDelta.deserialize(b"XXXX" + blob[4:])
    with pytest.raises(ValueError, match="data"):
        CompressedDelta.deserialize(blob + b"\0")
    with pytest.raises(ValueError, match="version"):
        CompressedDelta.deserialize(blob[:4] + bytes([9]) + blob[5:])
    with pytest.raises(TypeError, match="data"):
        CompressedDelta.deserialize("not bytes")


@pytest.mark.parametrize("shape", [(37, 29), (3, 1111), (2048 + 5,)])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_decode_add_matches_reconstruction(shape, backend):
    t = randn(*shape, seed=7)
    (c,) = compress([{"w": t}], UltraDeltaConfig(sparsity=0.9))
    ct = c.tensors["w"]
    base = randn(*shape, seed=8)
    expected = base + ct.to_dense()
    out = base.clone()
    fmt = to_device_format(ct)
    res = apply_compressed(out, **fmt, backend=backend)
    assert res is out
    err = (out - expected).norm() / expected.norm()
    assert float(err) <= 1e-6


def test_decode_add_float64_base_and_poisoned_codes_unused():
    t = randn(50, 40, seed=9)
    (c,) = compress([{"w": t}], UltraDeltaConfig(sparsity=0.97))
    fmt = to_device_format(c.tensors["w"])
    base = torch.zeros(50, 40, dtype=torch.float64)
    apply_compressed(base, **fmt, backend="torch")
    assert torch.equal(base.float(), c.tensors["w"].to_dense())
    # a dense add over a poisoned buffer would leak NaN; decode-and-add only touches the mask
    poisoned = poisoned_empty((50, 40))
    mask = c.tensors["w"].to_dense() != 0
    apply_compressed(poisoned, **fmt, backend="triton")
    assert torch.isnan(poisoned[~mask]).all()


def test_apply_compressed_bad_input():
    (c,) = compress([{"w": randn(40, 40, seed=1)}])
    fmt = to_device_format(c.tensors["w"])
    with pytest.raises(ValueError, match="mask_words"):
        apply_compressed(torch.zeros(41, 40), **fmt)
    with pytest.raises(TypeError, match="base"):
        apply_compressed(torch.zeros(40, 40, dtype=torch.int32), **fmt)
    with pytest.raises(ValueError, match="backend"):
        apply_compressed(torch.zeros(40, 40), **fmt, backend="cuda")
    (v,) = compress([{"w": randn(40, 40, seed=1)}], UltraDeltaConfig(quantize=False))
    with pytest.raises(ValueError, match="ct"):
        to_device_format(v.tensors["w"])
