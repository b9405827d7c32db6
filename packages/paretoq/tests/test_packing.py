"""Bit packing round trips, the code format, and the packed matmuls (torch and Triton) vs the dequantized reference."""

from __future__ import annotations

import paretoq
import pytest
import torch
from paretoq import packing
from paretoq.reference import pack_codes_reference, quantize_reference, unpack_codes_reference

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, poisoned_empty, randint, randn

BITS = (1, 1.58, 2, 3, 4)


def _quant_linear(n, k, bits, seed=0, dtype=torch.float32, bias=False):
    lin = torch.nn.Linear(k, n, bias=bias, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(randn(n, k, seed=seed, dtype=dtype, scale=0.05))
        if bias:
            lin.bias.copy_(randn(n, seed=seed + 1, dtype=dtype))
    q = paretoq.QuantLinear.from_linear(lin, bits)
    with torch.no_grad():  # a trained α is not the init: perturb it so rows saturate differently
        q.alpha.mul_(0.5 + randn(n, 1, seed=seed + 2, dtype=dtype).abs().clamp(max=1.0))
    return q


@pytest.mark.parametrize("plane_bits", [1, 2, 4])
@pytest.mark.parametrize(("n", "k"), [(32, 32), (5, 77), (3, 256), (1, 1)])
def test_pack_unpack_round_trip(plane_bits, n, k):
    codes = randint(0, 1 << plane_bits, n, k, seed=plane_bits * 100 + k)
    words = packing.pack_codes(codes, plane_bits)
    kp = packing.padded_k(k)
    assert words.dtype == torch.int32
    assert words.shape == (n, kp * plane_bits // 32)
    assert torch.equal(packing.unpack_codes(words, plane_bits, k), codes)
    # Same words as the explicit-loop reference (padded codes are zero).
    padded = torch.zeros(n, kp, dtype=torch.int64)
    padded[:, :k] = codes
    assert torch.equal(words, pack_codes_reference(padded, plane_bits))
    assert torch.equal(unpack_codes_reference(words, plane_bits), padded)


def test_planar_layout_by_hand():
    # 4-bit, K = 32: v = 8 codes per word, Wd = 4 words; code k = i·4 + j lives in word j at bits 4i.
    codes = torch.zeros(1, 32, dtype=torch.int64)
    codes[0, 1 * 4 + 2] = 0xA  # i = 1, j = 2
    codes[0, 7 * 4 + 0] = 0xF  # i = 7, j = 0 (top nibble: the word is negative as int32)
    words = packing.pack_codes(codes, 4)
    assert words.tolist() == [[-(1 << 28), 0, 0xA << 4, 0]]


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_codes_reproduce_the_quantizer(bits, dtype):
    w = randn(9, 45, seed=3, dtype=dtype)
    alpha = randn(9, 1, seed=4, dtype=dtype).abs() + 0.2
    codes, scale, zero = packing.weight_to_codes(w, alpha, bits)
    assert int(codes.min()) >= 0
    assert int(codes.max()) < (3 if bits == 1.58 else 1 << int(bits))
    deq = scale[:, None] * (codes.to(dtype) - zero)
    ref = quantize_reference(w, alpha, bits)
    assert_close(deq, ref, rtol=1e-15 if dtype == torch.float64 else 1e-7)


def test_binary_zero_weight_packs_as_plus_alpha():
    w = torch.tensor([[0.0, -0.2, 0.3]])
    codes, scale, zero = packing.weight_to_codes(w, torch.ones(1, 1), 1)
    assert (scale[:, None] * (codes - zero)).tolist() == [[1.0, -1.0, 1.0]]


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("k", [256, 77])
def test_packed_linear_stores_planes_and_dequantizes(bits, k):
    q = _quant_linear(24, k, bits, seed=1)
    p = paretoq.PackedLinear.from_quant_linear(q)
    kp = packing.padded_k(k)
    plane_bits = [pb for pb, _, _ in packing.plane_specs(bits)]
    assert [tuple(t.shape) for t in p.planes] == [(24, kp * pb // 32) for pb in plane_bits]
    assert sum(pb for pb in plane_bits) == (2 if bits == 1.58 else int(bits))
    assert_close(p.dequantize(), q.quantized_weight().detach(), rtol=1e-7)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("k", [256, 77])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_torch_packed_matmul_equals_dequantized_reference(bits, k, m):
    q = _quant_linear(64, k, bits, seed=2, bias=True)
    p = paretoq.PackedLinear.from_quant_linear(q)
    x = randn(m, k, seed=5)
    ref = x.double() @ p.dequantize(torch.float64).T + p.bias.double()
    out = paretoq.packed_matmul(x, p.planes, p.scale, bits, k, p.bias, backend="torch")
    assert_close(out, ref, rtol=1e-6)
    assert_close(
        paretoq.packed_matmul(x, p.planes, p.scale, bits, k, p.bias, backend="reference"),
        ref,
        rtol=1e-6,
    )
    # float64 activations: the torch path accumulates in float64.
    out64 = paretoq.packed_matmul(
        x.double(), p.planes, p.scale.double(), bits, k, p.bias.double(), backend="torch"
    )
    assert_close(out64, ref, rtol=1e-10)


@pytest.mark.skipif(not triton_usable(), reason="needs triton with a GPU or TRITON_INTERPRET=1")
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("k", [256, 77])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_triton_packed_matmul_equals_dequantized_reference(bits, k, m):
    from paretoq.kernels.packed_matmul import packed_matmul_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"
    q = _quant_linear(64, k, bits, seed=3, bias=(m == 4)).to(device)
    p = paretoq.PackedLinear.from_quant_linear(q)
    x = randn(m, k, seed=6, device=device)
    ref = x.double() @ p.dequantize(torch.float64).T
    if p.bias is not None:
        ref = ref + p.bias.double()
    out = poisoned_empty(m, 64, dtype=torch.float32, device=device)
    packed_matmul_triton(x, p.planes, p.scale, packing.plane_specs(bits), k, p.bias, out=out)
    assert_close(out, ref, rtol=1e-5)
    torch_path = paretoq.packed_matmul(x, p.planes, p.scale, bits, k, p.bias, backend="torch")
    assert_close(out, torch_path, rtol=1e-5)
    # Through the public op (3-D input, no grad).
    with torch.no_grad():
        out3 = paretoq.packed_matmul(
            x.reshape(1, m, k), p.planes, p.scale, bits, k, p.bias, backend="triton"
        )
    assert_close(out3.reshape(m, 64), ref, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("bits", BITS)
def test_packed_forward_equals_quant_linear(bits, backend):
    if backend == "triton" and not triton_usable():
        pytest.skip("needs triton with a GPU or TRITON_INTERPRET=1")
    device = "cuda" if (backend == "triton" and torch.cuda.is_available()) else "cpu"
    q = _quant_linear(40, 96, bits, seed=7).to(device)
    x = randn(3, 5, 96, seed=8, device=device)
    with torch.no_grad():
        y_q = q(x)
        y_p = paretoq.PackedLinear.from_quant_linear(q, backend=backend)(x)
    assert_close(y_p, y_q, rtol=1e-5)


def test_packed_matmul_bad_input():
    q = _quant_linear(8, 40, 2)
    p = paretoq.PackedLinear.from_quant_linear(q)
    with pytest.raises(ValueError, match="x: expected last dimension 40"):
        paretoq.packed_matmul(randn(2, 39), p.planes, p.scale, 2, 40)
    with pytest.raises(ValueError, match="planes"):
        paretoq.packed_matmul(randn(2, 40), p.planes, p.scale, 3, 40)
    with pytest.raises(ValueError, match="planes: expected int32"):
        paretoq.packed_matmul(randn(2, 40), [p.qweight.long()], p.scale, 2, 40)
    with pytest.raises(ValueError, match="backend"):
        paretoq.packed_matmul(randn(2, 40), p.planes, p.scale, 2, 40, backend="cuda")
    with pytest.raises(ValueError, match="bits"):
        paretoq.packed_matmul(randn(2, 40), p.planes, p.scale, 16, 40)
    with pytest.raises(ValueError, match="codes: values must lie"):
        packing.pack_codes(torch.full((2, 3), 4), 2)
    with pytest.raises(ValueError, match="plane_bits"):
        packing.pack_codes(torch.zeros(2, 3, dtype=torch.int64), 3)


@pytest.mark.parametrize(("n", "k"), [(4, 5), (3, 77), (2, 1)])
def test_ternary_base3_round_trip(n, k):
    codes = randint(0, 3, n, k, seed=k)
    packed = packing.pack_ternary_base3(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (n, -(-k // 5))
    assert int(packed.max()) <= 242
    assert torch.equal(packing.unpack_ternary_base3(packed, k), codes)
    with pytest.raises(ValueError, match="ternary codes"):
        packing.pack_ternary_base3(torch.full((1, 3), 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [7, 33, 96])
@pytest.mark.parametrize("bits", [1, 1.58, 2, 3, 4])
def test_fast_dequantize_equals_the_reference_dequantize(bits, k, dtype):
    """The speed case's fastest torch dequantizer: the same weight, bit for bit."""
    w = randn(5, k, seed=k)
    q = paretoq.QuantLinear.from_linear(torch.nn.Linear(k, 5, bias=False), bits)
    with torch.no_grad():
        q.weight.copy_(w)
    p = paretoq.PackedLinear.from_quant_linear(q)
    fast = packing.dequantize_packed_fast(p.planes, p.scale, bits, k, dtype)
    ref = packing.dequantize_packed(p.planes, p.scale, bits, k, dtype)
    assert fast.dtype == dtype and torch.equal(fast, ref)
