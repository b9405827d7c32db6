"""Root pytest configuration for the whole workspace.

Without a GPU, Triton kernels are tested on CPU tensors through the Triton interpreter: set
``TRITON_INTERPRET=1`` here, before any package (and so any ``@triton.jit``) is imported. With a
GPU the same tests run the kernels natively. Tests marked ``cuda`` are skipped without a GPU.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
