"""Triton kernels against the float64 references, under TRITON_INTERPRET=1 on CPU (C = 16)."""

import pytest
import torch
from jetnemotron.ops import dynamic_conv, gated_delta_rule
from jetnemotron.reference import dynamic_conv_unfold, gated_delta_rule_recurrent

from neurips25_core.device import triton_usable
from neurips25_core.testing import check_forward_backward, randn

pytestmark = pytest.mark.skipif(
    not triton_usable(), reason="needs triton with a GPU or TRITON_INTERPRET=1"
)


def _gdr_inputs(B, T, H, dk, dv, seed=0, with_state=False):
    xs = [
        randn(B, T, H, dk, seed=seed, requires_grad=True),
        randn(B, T, H, dk, seed=seed + 1, requires_grad=True),
        randn(B, T, H, dv, seed=seed + 2, requires_grad=True),
        (-randn(B, T, H, seed=seed + 3).abs() * 0.3).requires_grad_(True),
        torch.sigmoid(randn(B, T, H, seed=seed + 4)).requires_grad_(True),
    ]
    if with_state:
        xs.append(randn(B, H, dk, dv, seed=seed + 5, scale=0.5, requires_grad=True))
    return xs


@pytest.mark.parametrize(
    ("B", "T", "H", "dk", "dv", "with_state"),
    [
        (1, 37, 3, 5, 7, True),  # C ∤ T, d_k != d_v, odd dims padded to 16, initial state
        (2, 9, 1, 16, 12, False),  # T < C
        (1, 32, 2, 8, 20, True),  # C | T, d_v > 16 (padded to 32)
    ],
)
def test_triton_gated_delta_rule_matches_fp64_reference(B, T, H, dk, dv, with_state):
    inputs = _gdr_inputs(B, T, H, dk, dv, with_state=with_state)

    def fn(q, k, v, g, beta, s0=None):
        return gated_delta_rule(
            q,
            k,
            v,
            g,
            beta,
            initial_state=s0,
            output_final_state=True,
            chunk_size=16,
            backend="triton",
        )

    def ref(q, k, v, g, beta, s0=None):
        return gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=s0)

    errors = check_forward_backward(
        fn,
        ref,
        inputs,
        rtol=1e-5,
        grad_rtol=1e-5,
        names=["q", "k", "v", "g", "beta", "s0"][: len(inputs)],
    )
    assert set(errors) >= {"out0", "out1", "grad_q", "grad_k", "grad_v", "grad_g", "grad_beta"}


def test_triton_gated_delta_rule_equals_torch_path_without_state_output():
    q, k, v, g, beta = (t.detach() for t in _gdr_inputs(1, 20, 2, 6, 6, seed=4))
    o_t, s_t = gated_delta_rule(q, k, v, g, beta, chunk_size=16, backend="triton")
    o_c, _ = gated_delta_rule(q, k, v, g, beta, chunk_size=16, backend="torch")
    assert s_t is None
    assert torch.allclose(o_t, o_c, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("B", "T", "D", "W"), [(2, 9, 5, 4), (1, 3, 7, 3), (1, 20, 40, 4)])
@pytest.mark.parametrize("activation", ["silu", None])
def test_triton_dynamic_conv_matches_unfold(B, T, D, W, activation):
    # W = 3 exercises the power-of-two padding of the taps; T < BT and D > BD the tile masks.
    inputs = [
        randn(B, T, D, requires_grad=True),
        randn(B, T, D, W, seed=1, requires_grad=True),
        randn(B, D, W, seed=2, requires_grad=True),
    ]

    def fn(x, K, cache):
        return dynamic_conv(x, K, cache=cache, activation=activation, backend="triton")

    def ref(x, K, cache):
        return dynamic_conv_unfold(x, K, cache=cache, activation=activation)

    check_forward_backward(
        fn, ref, inputs, rtol=1e-6, grad_rtol=1e-6, names=["x", "kernels", "cache"]
    )


def test_triton_dynamic_conv_cache_continuation():
    x = randn(1, 7, 6)
    K = randn(1, 7, 6, 4, seed=1)
    y_full, c_full = dynamic_conv(x, K, backend="triton")
    y1, c1 = dynamic_conv(x[:, :2], K[:, :2], backend="triton")
    y2, c2 = dynamic_conv(x[:, 2:], K[:, 2:], cache=c1, backend="triton")
    assert torch.allclose(torch.cat([y1, y2], 1), y_full, atol=1e-6)
    assert torch.equal(c2, c_full)


def test_triton_chunk_size_must_be_a_power_of_two():
    q, k, v, g, beta = (t.detach() for t in _gdr_inputs(1, 8, 1, 4, 4))
    with pytest.raises(ValueError, match="chunk_size"):
        gated_delta_rule(q, k, v, g, beta, chunk_size=24, backend="triton")
