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
