"""Bad input raises a clear error naming the argument, and nothing is modified before the check."""

from __future__ import annotations

import pytest
import torch
from pdssm import PDSSM, PDSSMLayer, pd_scan
from pdssm.tasks import get_task


def _ok(batch=2, length=4, size=3):
    p = torch.zeros(batch, length, size, dtype=torch.long)
    d = torch.full((batch, length, size), 0.5 + 0j, dtype=torch.complex64)
    b = torch.ones(batch, length, size, dtype=torch.complex64)
    return p, d, b


def test_indices_out_of_range():
    p, d, b = _ok()
    p_bad = p.clone()
    p_bad[0, 0, 0] = 3
    with pytest.raises(ValueError, match=r"p: indices must lie in \[0, N\)"):
        pd_scan(p_bad, d, b)
    p_bad[0, 0, 0] = -1
    with pytest.raises(ValueError, match="p: indices"):
        pd_scan(p_bad, d, b)


@pytest.mark.parametrize(
    ("field", "value", "error", "match"),
    [
        ("d", torch.ones(2, 4, 3), TypeError, "d: expected a complex tensor"),
        ("b", torch.ones(2, 4, 3), TypeError, "b: expected a complex tensor"),
        ("b", torch.ones(2, 4, 3, dtype=torch.complex128), TypeError, "b: expected the dtype of d"),
        ("b", torch.ones(2, 5, 3, dtype=torch.complex64), ValueError, "b: expected the shape of d"),
        ("p", torch.zeros(2, 4, 4, dtype=torch.long), ValueError, "p: expected index shape"),
        ("p", torch.zeros(2, 4, 3, 2), ValueError, "p: a matrix p must have shape"),
        (
            "p",
            torch.zeros(2, 4, 3, dtype=torch.complex64),
            TypeError,
            "p: expected integer indices",
        ),
        ("p", torch.zeros(2, 4, 3, dtype=torch.bool), TypeError, "p: expected integer indices"),
        ("p", [[0]], TypeError, "p: expected a torch.Tensor"),
    ],
)
def test_dtype_and_shape_mismatches(field, value, error, match):
    p, d, b = _ok()
    args = {"p": p, "d": d, "b": b}
    args[field] = value
    with pytest.raises(error, match=match):
        pd_scan(**args)


def test_x0_checks():
    p, d, b = _ok()
    with pytest.raises(ValueError, match=r"x0: expected shape \(B, N\)"):
        pd_scan(p, d, b, x0=torch.zeros(2, 4, dtype=torch.complex64))
    with pytest.raises(TypeError, match="x0: expected the dtype of d"):
        pd_scan(p, d, b, x0=torch.zeros(2, 3))
    with pytest.raises(TypeError, match=r"x0: expected a torch\.Tensor"):
        pd_scan(p, d, b, x0=[0, 1, 2])


def test_unknown_orientation_and_backend():
    p, d, b = _ok()
    with pytest.raises(ValueError, match="orientation: expected one of"):
        pd_scan(p, d, b, orientation="diagonal")
    with pytest.raises(ValueError, match="backend: expected one of"):
        pd_scan(p, d, b, backend="cuda")


def test_triton_rejects_complex128():
    p, d, b = _ok()
    with pytest.raises(TypeError, match="triton' supports complex64 only"):
        pd_scan(p, d.to(torch.complex128), b.to(torch.complex128), backend="triton")


def test_triton_on_cpu_without_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    p, d, b = _ok()
    with pytest.raises(ValueError, match="needs CUDA tensors, or TRITON_INTERPRET=1"):
        pd_scan(p, d, b, backend="triton")


def test_inputs_untouched_by_failing_call():
    p, d, b = _ok()
    before = [t.clone() for t in (p, d, b)]
    with pytest.raises(ValueError):
        pd_scan(p, d, b, x0=torch.zeros(1, 3, dtype=torch.complex64))
    for t, t0 in zip((p, d, b), before):
        assert torch.equal(t, t0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"state_size": 0}, ValueError, "state_size: expected >= 1"),
        ({"state_size": 2.5}, TypeError, "state_size: expected an int"),
        ({"d_model": 0}, ValueError, "d_model: expected >= 1"),
        ({"dictionary_size": 0}, ValueError, "dictionary_size"),
        ({"orientation": "diag"}, ValueError, "orientation: expected one of"),
        ({"transition": "full"}, ValueError, "transition: expected one of"),
        ({"d_generator": "mlp3"}, ValueError, "d_generator"),
        ({"x0": "random"}, ValueError, "x0: expected one of"),
        ({"readout": "mlp"}, ValueError, "readout: expected one of"),
        ({"dropout": 1.5}, ValueError, "dropout"),
        ({"backend": "cuda"}, ValueError, "backend: expected one of"),
    ],
)
def test_layer_arguments(kwargs, error, match):
    args = {"d_model": 4, "state_size": 3, **kwargs}
    with pytest.raises(error, match=match):
        PDSSMLayer(**args)


def test_layer_and_model_inputs():
    layer = PDSSMLayer(4, 3)
    with pytest.raises(ValueError, match=r"u: expected shape \(B, L, 4\)"):
        layer(torch.zeros(2, 5, 3))
    with pytest.raises(TypeError, match="u: expected a real floating tensor"):
        layer(torch.zeros(2, 5, 4, dtype=torch.long))
    model = PDSSM(3, 2, d_model=4, state_size=3, num_layers=1)
    with pytest.raises(TypeError, match="tokens: expected an int32/int64 tensor"):
        model(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"tokens: expected shape \(B, L\)"):
        model(torch.zeros(2, 5, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="output: expected one of"):
        PDSSM(3, 2, output="first")


def test_task_arguments():
    with pytest.raises(ValueError, match="name: expected one of"):
        get_task("dyck")
    task = get_task("parity")
    with pytest.raises(ValueError, match="max_length: expected an int >= min_length"):
        task.sample(4, 10, 5)
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0, 10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_layer_refuses_an_input_dtype_that_is_not_its_own(dtype):
    # Before: these reached torch's matmul and failed with "mat1 and mat2 must have the same dtype".
    layer = PDSSMLayer(d_model=8, state_size=4)
    with pytest.raises(TypeError, match=r"u: expected the dtype of the layer's parameters"):
        layer(torch.randn(2, 5, 8, dtype=dtype))


def test_layer_in_float64_runs_and_half_precision_layers_are_refused():
    layer = PDSSMLayer(d_model=8, state_size=4).double()
    out = layer(torch.randn(2, 5, 8, dtype=torch.float64))
    assert out.dtype == torch.float64 and torch.isfinite(out).all()
    for dtype in (torch.float16, torch.bfloat16):
        half = PDSSMLayer(d_model=8, state_size=4).to(dtype)
        with pytest.raises(TypeError, match="PDSSMLayer: the layer computes in float32 or float64"):
            half(torch.randn(2, 5, 8, dtype=dtype))


@pytest.mark.parametrize("bad", [3, 7, -1])
def test_model_refuses_out_of_vocabulary_ids(bad):
    model = PDSSM(vocab_size=3, num_classes=4, d_model=8, state_size=4, num_layers=1)
    tokens = torch.tensor([[0, 1, 2, bad]])
    with pytest.raises(ValueError, match=r"tokens: expected ids in \[0, 3\) \(vocab_size=3\)"):
        model(tokens)
    assert model(tokens.clamp(0, 2)).shape == (1, 4, 4)
