"""The Triton TFLA kernels against the float64 recurrent reference, forward and backward.

Without a GPU these run under ``TRITON_INTERPRET=1`` (set by the root conftest) on CPU tensors; the
launcher fills every kernel-written buffer with NaN first under the interpreter, so a missed store
shows up as a non-finite output.
"""

from __future__ import annotations

import pytest
import torch
from tfla.reference import mlstm_recurrent

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close, check_forward_backward, randn

pytestmark = pytest.mark.skipif(
    not triton_usable(), reason="needs triton with a GPU or TRITON_INTERPRET=1"
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = ["q", "k", "v", "i", "f", "c0", "n0", "m0"]
RTOL = 1e-5  # the core's float32 bound
# With |ĩ| ~ 25 every exponent ĩ - m carries an absolute float32 rounding error ~25·6e-8, a relative
# error ~1.5e-6 per input weight that near-cancelling denominators amplify (measured: 1.7e-5 here,
# 5e-6 for the torch path): the extreme-gate cases are held to the Triton bound, 1e-4.
EXTREME_RTOL = 1e-4


def _triton(variant, normalize, L, tiles, detach=False):
    from tfla.kernels import mlstm_triton

    blq, blkv, bk, bv = tiles

    def fn(*a):
        return mlstm_triton(
            *a[:5], variant=variant, normalize=normalize, chunk_size=L, c0=a[5] if len(a) > 5 else None,
            n0=a[6] if len(a) > 6 else None, m0=a[7] if len(a) > 7 else None, detach_denominator=detach,
            return_last_state=True, block_lq=blq, block_lkv=blkv, block_dqk=bk, block_dv=bv,
        )  # fmt: skip

    return fn


def _ref(variant, normalize, detach=False):
    def fn(*a):
        return mlstm_recurrent(
            *a[:5], variant=variant, normalize=normalize, c0=a[5] if len(a) > 5 else None,
            n0=a[6] if len(a) > 6 else None, m0=a[7] if len(a) > 7 else None, detach_denominator=detach,
            return_last_state=True,
        )  # fmt: skip

    return fn


# (variant, normalize, detach, S, Dk, Dv, L, (BLQ, BLKV, BK, BV), initial states)
GRID = [
    (
        "exp",
        True,
        False,
        37,
        16,
        24,
        16,
        (16, 16, None, None),
        True,
    ),  # limit-chunk tiling, S % L != 0
    (
        "exp",
        True,
        False,
        70,
        48,
        24,
        32,
        (32, 16, 32, 16),
        False,
    ),  # Dqk over two blocks (masked), Dqk != Dv
    ("exp", True, False, 150, 16, 16, 64, (16, 32, None, None), True),  # BLKV > BLQ, NC = 3
    (
        "exp",
        True,
        False,
        300,
        16,
        16,
        128,
        (64, 32, None, None),
        False,
    ),  # chunk > 128 check region, NC = 3
    ("exp", True, False, 20, 16, 8, 64, (None, None, None, None), True),  # S < L
    ("exp", True, False, 40, 48, 96, 16, (16, 16, 32, 32), False),  # 48/96 head dims
    ("sig", True, False, 77, 24, 40, 32, (16, 16, None, None), True),
    ("sig", False, False, 50, 16, 16, 16, (16, 16, None, None), True),
    ("sig", False, False, 90, 16, 32, 64, (32, 16, None, 16), False),
    (
        "exp",
        True,
        True,
        70,
        16,
        16,
        32,
        (16, 16, None, None),
        True,
    ),  # official (detached) semantics
    ("sig", True, True, 45, 16, 16, 16, (16, 16, None, None), True),
]


# The slowest grid points under the interpreter (3-9 s each on a loaded 2-core machine) run with
# ``-m slow``; the default set keeps limit-chunk tiling, sig without normaliser, the detached
# denominator and S % L != 0.
_SLOW = {1, 2, 3, 5, 6, 8}
GRID = [
    pytest.param(*row, marks=pytest.mark.slow) if j in _SLOW else row for j, row in enumerate(GRID)
]


@pytest.mark.parametrize(
    ("variant", "normalize", "detach", "S", "Dk", "Dv", "L", "tiles", "states"), GRID
)
def test_triton_matches_reference(
    make_inputs, variant, normalize, detach, S, Dk, Dv, L, tiles, states
):
    xs = make_inputs(1, 2, S, Dk, Dv, states=states)
    if states and variant == "sig":
        xs = xs[:7]
    xs = [x.detach().to(DEV).requires_grad_() for x in xs]
    errs = check_forward_backward(
        _triton(variant, normalize, L, tiles, detach),
        _ref(variant, normalize, detach),
        xs,
        rtol=RTOL,
        names=NAMES[: len(xs)],
    )
    assert all(e <= RTOL for e in errs.values())


@pytest.mark.slow
def test_triton_chunk_256_with_three_chunks(make_inputs):
    """Chunks above 128 with NC >= 3: the official backward is suspected to index the stabiliser
    state in inter-chunk units there; ours stores m at every chunk boundary."""
    xs = [x.detach().to(DEV).requires_grad_() for x in make_inputs(1, 1, 530, 16, 16, states=True)]
    check_forward_backward(
        _triton("exp", True, 256, (64, 64, None, None)),
        _ref("exp", True),
        xs,
        rtol=RTOL,
        names=NAMES,
    )


@pytest.mark.parametrize(
    "gates",
    [
        dict(f_shift=-10.0),
        dict(i_shift=-15.0),
        dict(i_shift=15.0, i_scale=3.0),
        dict(f_shift=10.0, i_scale=5.0),
    ],
    ids=["f<<0", "i<-10", "i>>0", "f>>0"],
)
@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_triton_extreme_gates(make_inputs, gates, variant):
    """Outputs and q/k/v gradients at the issue's 1e-4; gate gradients against the size of their
    cancelling terms |q·dq| + |k·dk| (with f << 0 they are ~1e-4 of those terms)."""
    xs = [x.to(DEV) for x in make_inputs(1, 2, 48, 16, 16, **gates)]
    ref = [x.detach().cpu().double().requires_grad_() for x in xs]
    h = _triton(variant, True, 16, (16, 16, None, None))(*xs)[0]
    hr = _ref(variant, True)(*ref)[0]
    assert_close(h, hr, rtol=EXTREME_RTOL)
    g = randn(*h.shape, seed=3, dtype=torch.float64)
    grads = torch.autograd.grad(h, xs, g.float().to(DEV))
    grads_ref = torch.autograd.grad(hr, ref, g)
    for name, a, b in zip("qkv", grads[:3], grads_ref[:3]):
        assert_close(a, b, rtol=EXTREME_RTOL, name=f"d{name}")
    terms = (ref[0] * grads_ref[0]).sum(-1).abs() + (ref[1] * grads_ref[1]).sum(-1).abs()
    for name, a, b in zip("if", grads[3:], grads_ref[3:]):
        err = ((a.detach().cpu().double() - b).norm() / terms.norm()).item()
        assert err <= EXTREME_RTOL, f"d{name}: error {err:.2e} relative to |q·dq|+|k·dk|"


def test_triton_state_passing_equals_one_call(make_inputs):
    from tfla.kernels import mlstm_triton

    q, k, v, i, f = [x.to(DEV) for x in make_inputs(1, 2, 70, 16, 16, requires_grad=False)]
    h_all, st_all = mlstm_triton(q, k, v, i, f, chunk_size=16, return_last_state=True)
    c0 = n0 = m0 = None
    hs = []
    for lo, hi in [(0, 9), (9, 32), (32, 51), (51, 70)]:
        sl = slice(lo, hi)
        h, (c0, n0, m0) = mlstm_triton(
            q[:, :, sl],
            k[:, :, sl],
            v[:, :, sl],
            i[:, :, sl],
            f[:, :, sl],
            chunk_size=16,
            c0=c0,
            n0=n0,
            m0=m0,
            return_last_state=True,
        )
        hs.append(h)
    assert_close(torch.cat(hs, 2), h_all, rtol=RTOL, name="h")
    for a, b, name in zip((c0, n0, m0), st_all, "Cnm"):
        assert_close(a, b, rtol=RTOL, name=name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_low_precision_inputs(make_inputs, dtype):
    """bf16/fp16 inputs (upcast under the interpreter; tensor cores on GPU), float32 states."""
    from tfla.kernels import mlstm_triton

    xs = [x.to(DEV) for x in make_inputs(1, 2, 40, 16, 16, dtype=dtype)]
    h, (C, _n, _m) = mlstm_triton(*xs, chunk_size=16, return_last_state=True)
    assert h.dtype == dtype and C.dtype == torch.float32
    ref = [x.detach().cpu().double().requires_grad_() for x in xs]
    hr = mlstm_recurrent(*ref)
    assert_close(h, hr)
    g = randn(*h.shape, seed=3, dtype=torch.float64)
    for name, a, b in zip(
        "qkv", torch.autograd.grad(h, xs[:3], g.to(DEV, dtype)), torch.autograd.grad(hr, ref[:3], g)
    ):
        assert a.dtype == dtype
        assert_close(a, b, name=f"d{name}")


def test_triton_rejects_bad_tiles(make_inputs):
    from tfla.kernels import mlstm_triton

    xs = [x.to(DEV) for x in make_inputs(1, 1, 16, 16, 16, requires_grad=False)]
    with pytest.raises(ValueError, match="block_lq"):
        mlstm_triton(*xs, chunk_size=16, block_lq=24)
    with pytest.raises(ValueError, match="block_lq/block_lkv"):
        mlstm_triton(*xs, chunk_size=16, block_lkv=32)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_triton_gpu_bf16_long(variant):
    from tfla.kernels import mlstm_triton

    B, H, S, D = 1, 4, 2048, 128
    xs = [randn(B, H, S, D, seed=s, device="cuda", dtype=torch.bfloat16) for s in (1, 2, 3)]
    gates = [
        randn(B, H, S, seed=4, device="cuda", dtype=torch.bfloat16),
        randn(B, H, S, seed=5, device="cuda", dtype=torch.bfloat16) + 3,
    ]
    xs = [x.requires_grad_() for x in xs + gates]
    from tfla.chunkwise import mlstm_chunkwise

    ref = [x.detach().double().requires_grad_() for x in xs]
    h = mlstm_triton(*xs, variant=variant, chunk_size=128)
    hr = mlstm_chunkwise(*ref, variant=variant, chunk_size=128)
    assert_close(h, hr, rtol=1.6e-2)
    g = randn(*h.shape, seed=7, device="cuda", dtype=torch.float64)
    for a, b in zip(
        torch.autograd.grad(h, xs[:3], g.bfloat16()), torch.autograd.grad(hr, ref[:3], g)
    ):
        assert_close(a, b, rtol=2e-2)
