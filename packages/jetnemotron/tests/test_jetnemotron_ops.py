"""The ops against their references: chunked = sequential, semantics, dynamic conv, bad input."""

import pytest
import torch
from jetnemotron.ops import dynamic_conv, dynamic_conv_step, gated_delta_rule
from jetnemotron.reference import dynamic_conv_unfold, gated_delta_rule_recurrent

from neurips25_core.testing import assert_close, randn

F64 = torch.float64


def _inputs(B, T, H, dk, dv, seed=0, dtype=F64, requires_grad=False):
    q = randn(B, T, H, dk, seed=seed, dtype=dtype, requires_grad=requires_grad)
    k = randn(B, T, H, dk, seed=seed + 1, dtype=dtype, requires_grad=requires_grad)
    v = randn(B, T, H, dv, seed=seed + 2, dtype=dtype, requires_grad=requires_grad)
    g = (-randn(B, T, H, seed=seed + 3, dtype=dtype).abs() * 0.3).requires_grad_(requires_grad)
    beta = torch.sigmoid(randn(B, T, H, seed=seed + 4, dtype=dtype)).requires_grad_(requires_grad)
    return q, k, v, g, beta


@pytest.mark.parametrize(
    ("B", "T", "H", "dk", "dv", "C"),
    [
        (1, 1, 1, 4, 4, 16),  # a single token
        (2, 7, 3, 5, 9, 16),  # T < C, d_k != d_v, H = 3
        (1, 37, 1, 8, 6, 16),  # C does not divide T, odd T
        (2, 64, 3, 6, 5, 16),  # C divides T
        (1, 50, 2, 7, 11, 64),  # the default chunk size, T < C
    ],
)
@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_equals_sequential_fp64(B, T, H, dk, dv, C, with_state):
    q, k, v, g, beta = _inputs(B, T, H, dk, dv)
    S0 = randn(B, H, dk, dv, seed=9, dtype=F64) if with_state else None
    o_ref, S_ref = gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=S0)
    o, S = gated_delta_rule(
        q, k, v, g, beta, initial_state=S0, output_final_state=True, chunk_size=C, backend="torch"
    )
    assert_close(o, o_ref, rtol=1e-12, name="o")
    assert_close(S, S_ref, rtol=1e-12, name="S")


def test_split_and_carry_equals_one_pass():
    q, k, v, g, beta = _inputs(2, 41, 3, 6, 5, seed=3)
    o_full, S_full = gated_delta_rule(q, k, v, g, beta, output_final_state=True, chunk_size=16)
    o1, S1 = gated_delta_rule(
        *(t[:, :19] for t in (q, k, v, g, beta)), output_final_state=True, chunk_size=16
    )
    o2, S2 = gated_delta_rule(
        *(t[:, 19:] for t in (q, k, v, g, beta)),
        initial_state=S1,
        output_final_state=True,
        chunk_size=16,
    )
    assert_close(torch.cat([o1, o2], 1), o_full, rtol=1e-12)
    assert_close(S2, S_full, rtol=1e-12)


def test_reference_backend_matches_recurrent_and_no_state_when_not_asked():
    q, k, v, g, beta = _inputs(1, 9, 2, 4, 3)
    o, S = gated_delta_rule(q, k, v, g, beta, backend="reference")
    assert S is None
    assert_close(o, gated_delta_rule_recurrent(q, k, v, g, beta)[0], rtol=0.0)


def test_fp32_torch_path_matches_fp64_reference():
    q, k, v, g, beta = _inputs(2, 45, 3, 8, 12)
    o_ref, S_ref = gated_delta_rule_recurrent(q, k, v, g, beta)
    o, S = gated_delta_rule(
        *(t.float() for t in (q, k, v, g, beta)), output_final_state=True, chunk_size=16
    )
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    assert_close(o, o_ref, rtol=1e-5)
    assert_close(S, S_ref, rtol=1e-5)


def test_beta_zero_leaves_only_the_decayed_state():
    q, k, v, g, beta = _inputs(1, 13, 2, 5, 4)
    S0 = randn(1, 2, 5, 4, seed=5, dtype=F64)
    _, S = gated_delta_rule(
        q, k, v, g, torch.zeros_like(beta), initial_state=S0, output_final_state=True, chunk_size=16
    )
    decay = torch.exp(g.sum(1))[..., None, None]  # [B, H, 1, 1]
    assert_close(S, decay * S0, rtol=1e-12)


def test_unit_write_with_orthonormal_keys_stores_exactly_v():
    # g = 0, β = 1: each write overwrites the value stored under its key (the delta rule).
    H, d, dv = 2, 6, 5
    basis = torch.linalg.qr(randn(d, d, seed=1, dtype=F64))[0]  # orthonormal columns
    k = basis.T[None, :, None, :].expand(1, d, H, d).contiguous()  # key t = basis vector t
    v = randn(1, d, H, dv, seed=2, dtype=F64)
    S0 = randn(1, H, d, dv, seed=3, dtype=F64)  # something stored already: overwritten
    zeros = torch.zeros(1, d, H, dtype=F64)
    _, S = gated_delta_rule(
        k,
        k,
        v,
        zeros,
        torch.ones_like(zeros),
        initial_state=S0,
        output_final_state=True,
        use_qk_l2norm=False,
        chunk_size=4,
    )
    # every key reads back exactly its value: Sᵀ k_t = v_t
    readout = torch.einsum("thd,bhdv->bthv", k[0], S)
    assert_close(readout, v, rtol=1e-12)


def test_l2norm_has_eps_inside_the_square_root():
    q, k, v, g, beta = _inputs(1, 3, 1, 4, 2)
    q0 = torch.zeros_like(q)  # a zero query stays finite: 0·(0 + 1e-6)^−½ = 0
    o, _ = gated_delta_rule(q0, k, v, g, beta)
    assert torch.isfinite(o).all() and o.abs().max() == 0


def test_gradcheck_fp64_tiny():
    q, k, v, g, beta = _inputs(1, 5, 1, 3, 2, requires_grad=True)
    S0 = randn(1, 1, 3, 2, seed=7, dtype=F64, requires_grad=True)

    def f(q, k, v, g, beta, S0):
        o, S = gated_delta_rule(
            q, k, v, g, beta, initial_state=S0, output_final_state=True, chunk_size=4
        )
        return o, S

    # T = 5 with C = 4: two chunks, so the inter-chunk recurrence is differentiated too
    assert torch.autograd.gradcheck(f, (q, k, v, g, beta, S0))


def test_chunked_gradients_equal_reference_gradients():
    q, k, v, g, beta = _inputs(2, 21, 3, 4, 5, requires_grad=True)
    grads = []
    for backend in ("reference", "torch"):
        o, S = gated_delta_rule(
            q, k, v, g, beta, output_final_state=True, chunk_size=8, backend=backend
        )
        (o.sin().sum() + S.cos().sum()).backward()
        grads.append([t.grad.clone() for t in (q, k, v, g, beta)])
        for t in (q, k, v, g, beta):
            t.grad = None
    for name, a, b in zip(["q", "k", "v", "g", "beta"], *grads, strict=True):
        assert_close(a, b, rtol=1e-11, name=f"d{name}")


def test_long_decay_chunk_stays_finite():
    # Strong decay over a long chunk: e^{−γ_j} alone would overflow; only γ_i − γ_j <= 0 is used.
    q, k, v, g, beta = _inputs(1, 64, 1, 4, 4, dtype=torch.float32)
    g = torch.full_like(g, -20.0)
    o, _S = gated_delta_rule(q, k, v, g, beta, output_final_state=True, chunk_size=64)
    o_ref, _S_ref = gated_delta_rule_recurrent(*(t.double() for t in (q, k, v, g, beta)))
    assert torch.isfinite(o).all()
    assert_close(o, o_ref, rtol=1e-5)


# ------------------------------------------------------------------------------ dynamic conv


@pytest.mark.parametrize(
    ("B", "T", "D", "W"), [(1, 1, 3, 4), (2, 9, 5, 4), (2, 6, 3, 3), (1, 2, 4, 5)]
)
@pytest.mark.parametrize("activation", ["silu", None])
def test_dynamic_conv_equals_unfold(B, T, D, W, activation):
    x = randn(B, T, D, dtype=F64)
    K = randn(B, T, D, W, seed=1, dtype=F64)
    cache = randn(B, D, W, seed=2, dtype=F64)
    y_ref, c_ref = dynamic_conv_unfold(x, K, cache=cache, activation=activation)
    y, c = dynamic_conv(x, K, cache=cache, activation=activation, backend="torch")
    assert_close(y, y_ref, rtol=1e-14)
    assert_close(c, c_ref, rtol=0.0)
    # and the unfold reference agrees with the definition written out for one position
    t, ch = T - 1, D - 1
    full = torch.cat([cache[0, ch], x[0, :, ch]])
    z = sum(K[0, t, ch, w] * full[W + t - W + 1 + w] for w in range(W))
    expect = torch.nn.functional.silu(z) if activation else z
    assert abs(float(y_ref[0, t, ch] - expect)) < 1e-12


def test_dynamic_conv_step_equals_full_pass():
    B, T, D, W = 2, 7, 5, 4
    x = randn(B, T, D, dtype=F64)
    K = randn(B, T, D, W, seed=1, dtype=F64)
    y_full, c_full = dynamic_conv(x, K)
    cache = torch.zeros(B, D, W, dtype=F64)
    ys = []
    for t in range(T):
        y, cache = dynamic_conv_step(x[:, t], K[:, t], cache)
        ys.append(y)
    assert_close(torch.stack(ys, 1), y_full, rtol=1e-14)
    assert_close(cache, c_full, rtol=0.0)


@pytest.mark.parametrize("split", [1, 2, 3, 5])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_dynamic_conv_cache_continuation_equals_one_pass(split, backend):
    # includes 1 < T < W for the continuation (the official naive path gets this wrong)
    B, T, D, W = 2, 8, 3, 4
    x = randn(B, T, D, dtype=F64)
    K = randn(B, T, D, W, seed=1, dtype=F64)
    y_full, c_full = dynamic_conv(x, K, backend=backend)
    y1, c1 = dynamic_conv(x[:, :split], K[:, :split], backend=backend)
    y2, c2 = dynamic_conv(
        x[:, split : split + 2], K[:, split : split + 2], cache=c1, backend=backend
    )
    y3, c3 = dynamic_conv(x[:, split + 2 :], K[:, split + 2 :], cache=c2, backend=backend)
    assert_close(torch.cat([y1, y2, y3], 1), y_full, rtol=1e-14)
    assert_close(c3, c_full, rtol=0.0)


def test_dynamic_conv_gradients_match_unfold():
    x = randn(2, 9, 4, dtype=F64, requires_grad=True)
    K = randn(2, 9, 4, 4, seed=1, dtype=F64, requires_grad=True)
    cache = randn(2, 4, 4, seed=2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: dynamic_conv(a, b, cache=c)[0], (x, K, cache))


# ------------------------------------------------------------------------------ bad input


def test_bad_input_raises_naming_the_argument():
    q, k, v, g, beta = _inputs(1, 5, 2, 4, 3, dtype=torch.float32)
    with pytest.raises(ValueError, match="k:"):
        gated_delta_rule(q, k[..., :3], v, g, beta)
    with pytest.raises(ValueError, match="v:"):
        gated_delta_rule(q, k, v[:, :4], g, beta)
    with pytest.raises(ValueError, match="g:"):
        gated_delta_rule(q, k, v, g[:, :4], beta)
    with pytest.raises(ValueError, match="beta:"):
        gated_delta_rule(q, k, v, g, beta[..., :1])
    with pytest.raises(ValueError, match="g: expected log decays <= 0"):
        gated_delta_rule(q, k, v, g.abs() + 0.1, beta)
    with pytest.raises(TypeError, match="q:"):
        gated_delta_rule(q.long(), k, v, g, beta)
    with pytest.raises(TypeError, match="v:"):
        gated_delta_rule(q, k, v.double(), g, beta)
    with pytest.raises(TypeError, match="beta:"):
        gated_delta_rule(q, k, v, g, (beta > 0.5))
    with pytest.raises(ValueError, match="initial_state:"):
        gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="backend:"):
        gated_delta_rule(q, k, v, g, beta, backend="cuda")
    with pytest.raises(ValueError, match="chunk_size:"):
        gated_delta_rule(q, k, v, g, beta, chunk_size=0)
    with pytest.raises(ValueError, match="scale:"):
        gated_delta_rule(q, k, v, g, beta, scale=-1.0)
    x, K = torch.randn(1, 3, 4), torch.randn(1, 3, 4, 4)
    with pytest.raises(ValueError, match="cache:"):
        dynamic_conv(x, K, cache=torch.zeros(1, 4, 3))
    with pytest.raises(ValueError, match="cache:"):
        dynamic_conv_step(x[:, 0], K[:, 0], torch.zeros(1, 4, 5))
    with pytest.raises(ValueError, match="kernels:"):
        dynamic_conv(x, K[:, :2])
    with pytest.raises(TypeError, match="x:"):
        dynamic_conv(x.int(), K)
    with pytest.raises(ValueError, match="activation:"):
        dynamic_conv(x, K, activation="relu")
