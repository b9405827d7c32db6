"""The suite declares its cases; the adapter saved-bytes probe counts what autograd keeps."""

import torch
from rdfft import BCAdapter
from rdfft.bench import SUITE, saved_bytes
from torch import nn


def test_suite_cases():
    assert SUITE.name == "rdfft"
    assert {c.name for c in SUITE.cases} == {"transform", "finetune"}


def test_saved_bytes_counts_the_rdfft_adapter_spectrum():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = BCAdapter(nn.Linear(64, 64), 32, backend="rdfft")

        def forward(self, x):
            return self.q(x)

    x = torch.randn(3, 64, requires_grad=True)
    adapter, total = saved_bytes(Net(), x)
    # X (3·64 fp32) + P (2·2·32 fp32); the frozen base linear's saves are excluded
    assert adapter == 3 * 64 * 4 + 2 * 2 * 32 * 4
    assert total >= adapter


def test_op_saved_bytes_rdfft_is_half_of_rfft():
    from rdfft.bench import op_saved_bytes

    shape, p = (2, 8, 64), 16
    rfft, rd = op_saved_bytes("rfft", shape, p), op_saved_bytes("rdfft", shape, p)
    x_bytes = 2 * 8 * 64 * 4
    c_bytes = 4 * 4 * p * 4
    # rdfft: X (N reals per row) + P; rfft: its input x (FftR2CBackward0 keeps it) + the
    # complex X copy einsum makes ((p/2+1)/p · N complex-as-2-reals) + c (the rfft of c keeps
    # it too) + the complex P
    assert rd == x_bytes + c_bytes
    x_complex = x_bytes * (p // 2 + 1) * 2 // p
    assert rfft == x_bytes + x_complex + c_bytes + 4 * 4 * (p // 2 + 1) * 8
    assert 0.45 < rd / rfft < 0.5
