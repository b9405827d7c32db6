"""Quantizers: spec parsing, Viterbi vs brute force, packing, Gaussian error levels."""

import itertools

import pytest
import torch
from qpalette.codebooks import trellis_lut, trellis_tau
from qpalette.quantizers import (
    DEFAULT_PALETTE,
    QuantizerSpec,
    pack_bitplanes,
    pack_tiles,
    parse_spec,
    quantize,
    storage_bytes,
    unpack_bitplanes,
    unpack_tiles,
    viterbi,
    viterbi_tailbiting,
)


def _rel(q, w):
    return float((q.dequantize().double() - w.double()).square().sum() / w.double().square().sum())


def test_parse_spec_and_coverage():
    s = parse_spec("tcq-3.25")
    assert s == QuantizerSpec("tcq", 3.25) and s.half and s.kv == (6, 7)
    assert parse_spec("tcq-2-L10") == QuantizerSpec("tcq", 2.0, L=10)
    assert parse_spec("nuq-4").kind == "nuq" and parse_spec("vq-1.5").bits == 1.5
    rates = {QuantizerSpec("tcq", b / 4).bits for b in range(4, 21)}
    rates |= {s.bits for s in DEFAULT_PALETTE}
    assert {b / 4 for b in range(4, 21)} <= rates  # 1..5 in 0.25 steps
    for bad in ["tcq-3.3", "nuq-2.5", "vq-1.25", "foo-2", "tcq", "tcq-2-X3"]:
        with pytest.raises(ValueError, match="spec"):
            parse_spec(bad)
    with pytest.raises(TypeError, match="spec"):
        parse_spec(3.0)
    with pytest.raises(ValueError, match="KV"):
        QuantizerSpec("tcq", 2.0, L=4)  # KV = 4 >= L


def _path_cost(X, lut, states):
    return float((lut[states] - X).square().sum())


def _all_paths(L, KV, T):
    """Every state sequence of the trellis: (16·4**(T-1), T) for L=4, KV=2."""
    seqs = []
    for s0 in range(2**L):
        for us in itertools.product(range(2**KV), repeat=T - 1):
            s = [s0]
            for u in us:
                s.append(((s[-1] << KV) | u) % 2**L)
            seqs.append(s)
    return torch.tensor(seqs)


def test_viterbi_equals_brute_force_dp_fp64():
    L, KV, T = 4, 2, 6
    g = torch.Generator().manual_seed(0)
    lut = torch.randn(2**L, 2, generator=g, dtype=torch.float64)
    paths = _all_paths(L, KV, T)
    P = 2 ** (L - KV)
    for trial in range(4):
        X = torch.randn(1, T, 2, generator=g, dtype=torch.float64)
        costs = (lut[paths] - X).square().sum((-1, -2))
        states = viterbi(X, lut, L, KV)[0]
        assert (states[1:] >> KV == states[:-1] % P).all()  # every transition is legal
        assert abs(_path_cost(X[0], lut, states) - float(costs.min())) < 1e-12
        # constrained: first state's top bits and last state's low bits forced
        top = torch.tensor([trial % P])
        forced = viterbi(X, lut, L, KV, start_top=top, end_low=top)[0]
        ok = (paths[:, 0] >> KV == top) & (paths[:, -1] % P == top)
        assert forced[0] >> KV == top and forced[-1] % P == top
        assert abs(_path_cost(X[0], lut, forced) - float(costs[ok].min())) < 1e-12
        # tail-biting: circularly consistent, optimal given its overlap, >= the circular optimum
        tb = viterbi_tailbiting(X, lut, L, KV)[0]
        assert tb[0] >> KV == tb[-1] % P
        circ = paths[:, 0] >> KV == paths[:, -1] % P
        assert _path_cost(X[0], lut, tb) >= float(costs[circ].min()) - 1e-12
        same = circ & (paths[:, 0] >> KV == tb[0] >> KV)
        assert abs(_path_cost(X[0], lut, tb) - float(costs[same].min())) < 1e-12


def test_pack_unpack_identity_and_size():
    L, KV = 10, 3
    lut = trellis_lut(L, 9, trellis_tau(9))
    X = torch.randn(5, 128, 2, generator=torch.Generator().manual_seed(1))
    states = viterbi_tailbiting(X, lut, L, KV)
    words = pack_tiles(states, L, KV)
    assert words.shape == (5, 128 * KV // 32) and words.dtype == torch.int32
    assert torch.equal(unpack_tiles(words, L, KV, 128), states)
    codes = torch.randint(0, 32, (7, 50), generator=torch.Generator().manual_seed(2))
    planes = pack_bitplanes(codes, 5)
    assert planes.shape == (7, 2, 5)
    assert torch.equal(unpack_bitplanes(planes, 5, 50), codes)


@pytest.mark.parametrize("spec", ["tcq-2-L8", "tcq-2.25-L8", "nuq-3", "vq-2", "vq-1.5"])
def test_quantize_roundtrip_and_bytes(spec):
    g = torch.Generator().manual_seed(3)
    w = torch.randn(32, 64, generator=g) * 0.02
    w[5] = 0  # zero row: σ guarded, stays zero
    q = quantize(w, spec)
    d = q.dequantize()
    assert d.shape == w.shape and torch.isfinite(d).all() and (d[5] == 0).all()
    code_bytes = sum(c.numel() * 4 for c in q.codes)
    assert q.nbytes == code_bytes + 2 * q.codebook.numel() + 2 * 32
    assert storage_bytes(spec, w.shape) + 64 == q.nbytes
    assert _rel(q, w) < 0.25
    s = parse_spec(spec)
    if s.kind == "tcq":
        assert code_bytes * 8 == (32 * 64 // 256) * 128 * sum(s.kv) // 2  # 128·KV bits per tile


def test_quantize_rejects_bad_shapes():
    with pytest.raises(ValueError, match="multiples of 16"):
        quantize(torch.randn(24, 32), "tcq-2-L8")
    with pytest.raises(ValueError, match="half-TCQ"):
        quantize(torch.randn(16, 16), "tcq-2.25-L8")
    with pytest.raises(ValueError, match="weight"):
        quantize(torch.randn(16), "nuq-2")


def _gauss_err(spec, n=128, seed=0):
    w = torch.randn(n, 256, generator=torch.Generator().manual_seed(seed))
    return _rel(quantize(w, spec), w)


def test_gaussian_error_levels_reduced_L():
    # spec: L = 8 ≈ 0.097 / 0.034 at 2 / 3 bits (independent check); ours is tail-biting
    e82, e83 = _gauss_err("tcq-2-L8"), _gauss_err("tcq-3-L8")
    assert abs(e82 / 0.097 - 1) < 0.05 and abs(e83 / 0.034 - 1) < 0.07
    e102 = _gauss_err("tcq-2-L10")
    e8h = _gauss_err("tcq-2.5-L8")
    assert e82 > e8h > e83  # monotone in bits
    assert e82 > e102  # monotone in L
    # NUQ and VQ reach the official table (0.1175 / 0.1086 at 2 bits)
    assert abs(_gauss_err("nuq-2") / 0.1175 - 1) < 0.03
    assert abs(_gauss_err("vq-2") / 0.1086 - 1) < 0.04


@pytest.mark.slow
def test_gaussian_error_levels_L12_L16():
    e122, e123 = _gauss_err("tcq-2-L12", n=64), _gauss_err("tcq-3-L12", n=64)
    assert abs(e122 / 0.075 - 1) < 0.05 and abs(e123 / 0.021 - 1) < 0.07
    e16 = _gauss_err("tcq-2", n=32)
    assert abs(e16 / 0.071 - 1) < 0.05
    assert e16 < e122
