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

# Under pytest-xdist every core already runs a worker: more intra-op threads per worker only
# oversubscribe the cores, and OpenMP's spin-waits then make small ops 10x slower or worse.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("NEURIPS25_TEST_THREADS", "1") != "0":
    torch.set_num_threads(int(os.environ.get("NEURIPS25_TEST_THREADS", "1")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
