import pytest
import torch
import torch.nn.functional as F
from mambaspectrum import selective_scan, selective_scan_chunked, selective_scan_ref

from neurips25_core.testing import assert_close, randn


def inputs(batch=2, d=5, n=3, length=37, dtype=torch.float32, seed=0, with_h0=True):
    u = randn(batch, d, length, seed=seed, dtype=dtype)
    delta = F.softplus(randn(batch, d, length, seed=seed + 1, dtype=dtype))
    A = -torch.exp(randn(d, n, seed=seed + 2, dtype=dtype))
    B = randn(batch, n, length, seed=seed + 3, dtype=dtype)
    C = randn(batch, n, length, seed=seed + 4, dtype=dtype)
    D = randn(d, seed=seed + 5, dtype=dtype)
    z = randn(batch, d, length, seed=seed + 6, dtype=dtype)
    h0 = randn(batch, d, n, seed=seed + 7, dtype=dtype) if with_h0 else None
    return u, delta, A, B, C, D, z, h0


@pytest.mark.parametrize("compute_dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("length", "chunk"), [(1, 16), (37, 16), (50, 7), (64, 64)])
def test_chunked_matches_reference_forward_and_backward(length, chunk, compute_dtype):
    args = inputs(length=length)
    leaves = [a.clone().requires_grad_(True) for a in args]
    y, h = selective_scan_chunked(
        *leaves, return_last_state=True, chunk=chunk, compute_dtype=compute_dtype
    )
    ref_leaves = [a.double().clone().requires_grad_(True) for a in args]
    y_ref, h_ref = selective_scan_ref(*ref_leaves, return_last_state=True)
    assert_close(y, y_ref, rtol=1e-5)
    assert_close(h, h_ref, rtol=1e-5)
    gy = randn(*y.shape, seed=99)
    gh = randn(*h.shape, seed=98)
    grads = torch.autograd.grad((y * gy).sum() + (h * gh).sum(), leaves)
    grads_ref = torch.autograd.grad(
        (y_ref * gy.double()).sum() + (h_ref * gh.double()).sum(), ref_leaves
    )
    for name, g, g_ref in zip(
        ["u", "delta", "A", "B", "C", "D", "z", "h0"], grads, grads_ref, strict=True
    ):
        assert torch.isfinite(g).all(), name
        assert_close(g, g_ref, rtol=1e-5)


def test_chunked_float64_is_exact_to_1e10():
    args = inputs(dtype=torch.float64, length=45)
    assert_close(selective_scan_chunked(*args, chunk=8), selective_scan_ref(*args), rtol=1e-10)


def test_chunked_backward_passes_gradcheck_in_float64():
    # the hand-written adjoint scan against finite differences, across chunk boundaries and a
    # decay large enough to split segments down to single tokens
    args = inputs(batch=1, d=2, n=2, length=11, dtype=torch.float64, seed=3)
    u, delta, A, B, C, D, z, h0 = (a.requires_grad_(True) for a in args)

    def f(u, delta, A, B, C, D, z, h0, scale):
        y, h = selective_scan_chunked(
            u, delta * scale, A, B, C, D, z, h0, return_last_state=True, chunk=4
        )
        return y, h

    for scale in (1.0, 300.0):  # 300: every segment of > 1 token exceeds the headroom
        assert torch.autograd.gradcheck(
            lambda *a, s=scale: f(*a, s), (u, delta, A, B, C, D, z, h0), atol=1e-7, rtol=1e-6
        )


def test_float32_compute_splits_large_decay_and_stays_finite():
    u, delta, A, B, C, *_ = inputs(length=40)
    delta = delta * 30  # hundreds of nats per chunk: beyond float32's exp range unless split
    leaves = [t.clone().requires_grad_(True) for t in (u, delta, A, B, C)]
    y = selective_scan_chunked(*leaves, chunk=16, compute_dtype=torch.float32)
    y_ref = selective_scan_ref(*(t.double() for t in (u, delta, A, B, C)))
    assert_close(y, y_ref, rtol=1e-5)
    grads = torch.autograd.grad(y.square().sum(), leaves)
    assert all(torch.isfinite(g).all() for g in grads)


def test_bad_compute_dtype_is_refused():
    u, delta, A, B, C, *_ = inputs()
    with pytest.raises(ValueError, match="compute_dtype"):
        selective_scan_chunked(u, delta, A, B, C, compute_dtype=torch.float16)


def test_large_decay_does_not_overflow():
    u, delta, A, B, C, _D, _z, _h0 = inputs(length=40)
    y = selective_scan_chunked(u, delta * 200.0, A, B, C, chunk=40)
    assert torch.isfinite(y).all()
    assert_close(y, selective_scan_ref(u, delta * 200.0, A, B, C), rtol=1e-5)


def test_backward_is_finite_when_a_chunk_decays_by_hundreds_of_nats():
    # 40 tokens x 12.5 nats = 500 nats in one chunk: under the forward's 600-nat split, but
    # 1/growth^2 (the backward of x / growth) would overflow float64 and turn gradients to NaN
    u, _delta, _A, B, C, *_ = inputs(length=40, d=3, n=2)
    delta = torch.full_like(u, 12.5)
    A = -torch.ones(3, 2) * torch.tensor([1.0, 0.02])
    leaves = [t.clone().requires_grad_(True) for t in (u, delta, A, B, C)]
    y = selective_scan_chunked(*leaves, chunk=40)
    ref_leaves = [t.double().clone().requires_grad_(True) for t in (u, delta, A, B, C)]
    y_ref = selective_scan_ref(*ref_leaves)
    gy = randn(*y.shape, seed=97)
    grads = torch.autograd.grad((y * gy).sum(), leaves)
    grads_ref = torch.autograd.grad((y_ref * gy.double()).sum(), ref_leaves)
    for name, g, g_ref in zip(["u", "delta", "A", "B", "C"], grads, grads_ref, strict=True):
        assert torch.isfinite(g).all(), name
        assert_close(g, g_ref, rtol=1e-5)


def test_chunk_boundary_state_carry_equals_h0():
    u, delta, A, B, C, *_ = inputs(length=30, with_h0=False)
    y_full = selective_scan(u, delta, A, B, C, backend="chunked")
    y1, h = selective_scan(
        u[..., :13], delta[..., :13], A, B[..., :13], C[..., :13], return_last_state=True
    )
    y2 = selective_scan(u[..., 13:], delta[..., 13:], A, B[..., 13:], C[..., 13:], h0=h)
    assert_close(torch.cat([y1, y2], -1), y_full, rtol=1e-5)


def test_bad_shapes_are_refused():
    u, delta, A, B, C, _D, _z, h0 = inputs()
    with pytest.raises(ValueError, match="delta"):
        selective_scan(u, delta[..., :-1], A, B, C)
    with pytest.raises(ValueError, match="A"):
        selective_scan(u, delta, A[:-1], B, C)
    with pytest.raises(ValueError, match="B"):
        selective_scan(u, delta, A, B[:, :-1], C)
    with pytest.raises(ValueError, match="h0"):
        selective_scan(u, delta, A, B, C, h0=h0[:, :-1])
    with pytest.raises(ValueError, match="backend"):
        selective_scan(u, delta, A, B, C, backend="cuda")
    with pytest.raises(TypeError, match="u"):
        selective_scan(u.long(), delta, A, B, C)


@pytest.mark.parametrize(
    ("length", "groups", "with_h0"), [(21, 1, False), (21, 2, True), (8, 1, True)]
)
def test_mamba2_reference_matches_hf_chunk_scan(length, groups, with_h0):
    """The float64 Mamba-2 reference against transformers' torch SSD scan (`mamba2_chunk_scan`,
    which computes in float32: fp32 tolerance), ragged L vs chunk_size 8, grouped B/C, h0."""
    from mambaspectrum.reference import mamba2_scan_ref
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    batch, heads, p, n = 2, 4, 3, 5
    x = randn(batch, length, heads, p, seed=0, dtype=torch.float64)
    dt_raw = randn(batch, length, heads, seed=1, dtype=torch.float64)
    dt_bias = randn(heads, seed=2, dtype=torch.float64)
    A = -torch.exp(randn(heads, seed=3, dtype=torch.float64))
    B = randn(batch, length, groups, n, seed=4, dtype=torch.float64)
    C = randn(batch, length, groups, n, seed=5, dtype=torch.float64)
    D = randn(heads, seed=6, dtype=torch.float64)
    h0 = randn(batch, heads, p, n, seed=7, dtype=torch.float64) if with_h0 else None
    limit = (0.0, float("inf"))
    y_hf, h_hf = mamba2_chunk_scan(
        x,
        dt_raw,
        A,
        B,
        C,
        chunk_size=8,
        D=D,
        dt_bias=dt_bias,
        initial_states=h0,
        dt_softplus=True,
        dt_limit=limit,
        return_final_states=True,
    )
    dt = F.softplus(dt_raw + dt_bias)
    y, h = mamba2_scan_ref(x, dt, A, B, C, D=D, h0=h0, return_last_state=True)
    assert y.dtype == torch.float64
    assert_close(y_hf.double(), y, rtol=1e-5)
    assert_close(h_hf.double(), h, rtol=1e-5)


@pytest.mark.parametrize(
    ("length", "d", "n", "with_h0", "gate"), [(37, 5, 3, True, True), (16, 40, 16, False, False)]
)
def test_triton_matches_reference_interpreted(length, d, n, with_h0, gate, monkeypatch):
    """The forward Triton kernel (TRITON_INTERPRET=1 on CPU, set by the root conftest) against the
    float64 reference: ragged L, d_inner not a multiple of the block, N not a power of two, h0."""
    from neurips25_core.device import triton_usable

    if not triton_usable():
        pytest.skip("triton not usable here (needs CUDA or TRITON_INTERPRET=1)")
    u, delta, A, B, C, D, z, h0 = inputs(d=d, n=n, length=length, with_h0=with_h0)
    import mambaspectrum.kernels.scan as kernels

    from neurips25_core.testing import poisoned_empty

    monkeypatch.setattr(kernels, "_empty", poisoned_empty)  # unwritten outputs would stay NaN
    z = z if gate else None
    y, h = selective_scan(u, delta, A, B, C, D, z, h0, return_last_state=True, backend="triton")
    y_ref, h_ref = selective_scan_ref(u, delta, A, B, C, D, z, h0, return_last_state=True)
    assert y.dtype == torch.float32 and torch.isfinite(y).all()
    assert_close(y, y_ref, rtol=1e-5)
    assert_close(h, h_ref, rtol=1e-5)


def test_triton_refuses_autograd():
    u, delta, A, B, C, *_ = inputs(length=8)
    with pytest.raises(ValueError, match="backend"):
        selective_scan(u.requires_grad_(True), delta, A, B, C, backend="triton")
