"""The Triton expert_mix kernel (lope.kernels.mix) against the float64 per-expert loop.

Without a GPU the root conftest sets TRITON_INTERPRET=1 and the kernel runs on CPU tensors through
the interpreter; on a GPU the same tests run it natively (CUDA tensors).
"""

import itertools

import pytest
import torch
from lope import ops
from lope.reference import adapter_reference, expert_mix_reference

from neurips25_core.device import triton_usable
from neurips25_core.testing import FP32_RTOL, assert_close, check_forward_backward, randn

pytestmark = pytest.mark.skipif(
    not triton_usable(), reason="needs Triton with a CUDA GPU or TRITON_INTERPRET=1"
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _gates(T, N, seed, dtype=torch.float32):
    return torch.softmax(randn(T, N, seed=seed, dtype=dtype), dim=-1)


# The grid: T ∈ {1, 7, 129}, out ∈ {1, 33, 64}, N·r ∈ {8, 12, 16, 20}.
SHAPES = list(itertools.product((1, 7, 129), (1, 33, 64), ((4, 2), (4, 3), (4, 4), (5, 4))))


def _inputs(T, out, N, r, dtype=torch.float32, seed=1):
    h = randn(T, r, seed=seed, dtype=dtype).to(DEVICE).requires_grad_()
    gates = _gates(T, N, seed + 1).to(DEVICE).requires_grad_()
    B = randn(N, out, r, seed=seed + 2, dtype=dtype).to(DEVICE).requires_grad_()
    return h, gates, B


@pytest.mark.parametrize(("T", "out", "Nr"), SHAPES)
def test_triton_matches_reference(T, out, Nr, poisoned_buffers):
    N, r = Nr
    h, gates, B = _inputs(T, out, N, r)
    errors = check_forward_backward(
        lambda h, g, B: ops.expert_mix(h, g, B, scaling=8.0, backend="triton"),
        lambda h, g, B: expert_mix_reference(h, g, B, 8.0),
        [h, gates, B],
        rtol=FP32_RTOL,  # the 1e-5 for the interpreter
        names=["h", "gates", "B"],
    )
    assert poisoned_buffers == [(T, out)], "the kernel did not write into a poisoned buffer"
    assert set(errors) == {"out0", "grad_h", "grad_gates", "grad_B"}


def test_triton_output_is_the_kernels(poisoned_buffers):
    # The autograd node is the Triton Function's, and every entry of the NaN buffer was written.
    h, gates, B = _inputs(33, 17, 4, 5)
    y = ops.expert_mix(h, gates, B, 2.0, backend="triton")
    assert type(y.grad_fn).__name__ == "_ExpertMixTritonBackward"
    assert not y.isnan().any()
    assert poisoned_buffers == [(33, 17)]


def test_triton_any_strides_and_mixed_gate_dtype(poisoned_buffers):
    # Non-contiguous views of every operand (transposed h, permuted B, strided gates) and float64
    # gates with float32 activations: the kernel reads strides and upcasts, it never copies.
    T, out, N, r = 19, 21, 3, 5
    h = randn(r, T, seed=3).to(DEVICE).T.requires_grad_()
    B = randn(N, r, out, seed=4).to(DEVICE).permute(0, 2, 1).requires_grad_()
    gates = _gates(T, 2 * N, 5, dtype=torch.float64).to(DEVICE)[:, ::2].requires_grad_()
    assert not (h.is_contiguous() or B.is_contiguous() or gates.is_contiguous())
    check_forward_backward(
        lambda h, g, B: ops.expert_mix(h, g, B, 0.5, backend="triton"),
        lambda h, g, B: expert_mix_reference(h, g, B, 0.5),
        [h, gates, B],
        rtol=FP32_RTOL,
        names=["h", "gates", "B"],
    )


def test_triton_bfloat16(poisoned_buffers):
    # bf16 operands are upcast before tl.dot (no bf16 dot) and accumulated in fp32; the result is
    # rounded to bf16 once, so it meets the project's bf16 tolerance against float64.
    h, gates, B = _inputs(23, 40, 4, 4, dtype=torch.bfloat16)
    y = ops.expert_mix(h, gates, B, 8.0, backend="triton")
    assert y.dtype == torch.bfloat16
    ref = expert_mix_reference(h.double(), gates.double(), B.double(), 8.0)
    assert_close(y, ref, rtol=1.6e-2)


@pytest.mark.parametrize("mode", ["stage2", "inference"])
def test_adapter_triton_matches_reference(mode):
    T, d_in, out, N, r = 9, 13, 11, 4, 3
    x = randn(T, d_in, seed=0).to(DEVICE).requires_grad_()
    A = randn(r, d_in, seed=1).to(DEVICE).requires_grad_()
    B = randn(N, out, r, seed=2).to(DEVICE).requires_grad_()
    W = randn(N, d_in, seed=3).to(DEVICE).requires_grad_()
    kwargs = dict(poison=(3,), mode=mode)
    check_forward_backward(
        lambda x, A, B, W: ops.adapter(x, A, B, W, 8.0, backend="triton", **kwargs),
        lambda x, A, B, W: adapter_reference(x, A, B, W, 8.0, (3,), mode, 3, 1.0, "x"),
        [x, A, B, W],
        rtol=FP32_RTOL,
        names=["x", "A", "B", "router"],
    )


def test_auto_is_torch_on_cpu_and_triton_on_cuda():
    h, gates, B = _inputs(5, 6, 4, 2)
    y = ops.expert_mix(h, gates, B, 1.0)  # backend="auto"
    expected = "_ExpertMixTritonBackward" if h.is_cuda else "_ExpertMixBackward"
    assert type(y.grad_fn).__name__ == expected


def test_triton_refuses_float64_and_cpu_without_interpreter(monkeypatch):
    h, gates, B = (t.detach().double() for t in _inputs(5, 6, 4, 2))
    with pytest.raises(TypeError, match="h: backend 'triton'"):
        ops.expert_mix(h, gates, B, 1.0, backend="triton")
    monkeypatch.setattr(ops, "triton_interpret", lambda: False)
    h, gates, B = torch.randn(5, 2), torch.rand(5, 4), torch.randn(4, 6, 2)
    with pytest.raises(ValueError, match="backend: 'triton' needs CUDA tensors"):
        ops.expert_mix(h, gates, B, 1.0, backend="triton")
