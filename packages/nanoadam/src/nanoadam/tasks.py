"""Offline tasks of the reduced reproduction.

* :func:`teacher_student` — the paper's §2.3 toy: a 2-neuron ReLU teacher, a width-20 student
  pretrained by GD, one teacher neuron added, then fine-tuned by masked GD on the 5 % smallest-|w|
  or the 5 % largest-|g| entries per layer.
* :class:`PackageSnippets` — classify 256-byte snippets of stdlib source by the package they come
  from (files split train/test by a hash of the path); two disjoint sets of six packages make the
  two sequential tasks.
"""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from neurips25_core.data import stdlib_files

from .optimizer import select_indices

TASK1 = ("email", "xml", "http", "logging", "urllib", "json")
TASK2 = ("asyncio", "ctypes", "multiprocessing", "importlib", "unittest", "tkinter")


# ------------------------------------------------------------------ teacher–student toy
def _net(params, x):
    w, a = params
    return torch.relu(x @ w.T) @ a


def teacher_student(seed: int, pre_steps: int, ft_steps: int, density: float = 0.05,
                    n_train: int = 256, n_test: int = 2048, width: int = 20) -> dict:
    """Pretrain a student on a 2-neuron teacher, add a third teacher neuron, fine-tune both ways.

    Returns ``{criterion: {"test_loss", "l2_shift"}}`` for ``small_weight`` and ``large_grad``.
    """
    g = torch.Generator().manual_seed(seed)
    d = 2
    tw = torch.randn(3, d, generator=g, dtype=torch.float64)
    tw = tw / tw.norm(dim=1, keepdim=True)
    ta = torch.ones(3, dtype=torch.float64)
    x = torch.randn(n_train, d, generator=g, dtype=torch.float64)
    xt = torch.randn(n_test, d, generator=g, dtype=torch.float64)
    w = 0.1 * torch.randn(width, d, generator=g, dtype=torch.float64)
    a = 0.1 * torch.randn(width, generator=g, dtype=torch.float64)

    def gd(params, target, steps, lr, select=None):
        params = [p.clone().requires_grad_(True) for p in params]
        for _ in range(steps):
            loss = 0.5 * (_net(params, x) - target).square().mean()
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, gr in zip(params, grads):
                    if select is None:
                        p -= lr * gr
                    else:
                        key = p.abs() if select == "small_weight" else -gr.abs()
                        idx = select_indices(key, density, None)
                        p.view(-1)[idx] -= lr * gr.reshape(-1)[idx]
        return [p.detach() for p in params]

    y2 = _net((tw[:2], ta[:2]), x)
    pre = gd([w, a], y2, pre_steps, 2.0)
    y3, yt3 = _net((tw, ta), x), _net((tw, ta), xt)
    out = {}
    for crit in ("small_weight", "large_grad"):
        ft = gd(pre, y3, ft_steps, 1.0, select=crit)
        test = float(0.5 * (_net(ft, xt) - yt3).square().mean())
        shift = float(torch.cat([(f - p).reshape(-1) for f, p in zip(ft, pre)]).norm())
        out[crit] = {"test_loss": test, "l2_shift": shift}
    return out


# ------------------------------------------------------------------ stdlib package snippets
def _is_test_file(rel: str) -> bool:
    return hashlib.sha256(rel.encode()).digest()[0] < 256 * 0.25


class PackageSnippets:
    """Byte snippets labelled by stdlib package; ``batch(split, n, seed)`` -> ``(x [n, L], y [n])``."""

    def __init__(self, packages: tuple[str, ...], length: int = 256):
        base = Path(sysconfig.get_paths()["stdlib"])
        self.packages, self.length = packages, length
        self.data: dict[str, list[np.ndarray]] = {"train": [], "test": []}
        by_pkg = {p: {"train": [], "test": []} for p in packages}
        for f in stdlib_files(base):
            parts = f.relative_to(base).parts
            if len(parts) > 1 and parts[0] in by_pkg:
                rel = f.relative_to(base).as_posix()
                split = "test" if _is_test_file(rel) else "train"
                by_pkg[parts[0]][split].append(f.read_bytes())
        for split in ("train", "test"):
            for p in packages:
                blob = b"\n".join(by_pkg[p][split])
                if len(blob) < 4 * length:
                    raise ValueError(f"packages: {p!r} has too little {split} text ({len(blob)} bytes)")
                self.data[split].append(np.frombuffer(blob, dtype=np.uint8))

    def batch(self, split: str, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(seed)
        ys = rng.integers(0, len(self.packages), n)
        xs = np.empty((n, self.length), dtype=np.int64)
        for i, y in enumerate(ys):
            blob = self.data[split][y]
            s = rng.integers(0, blob.size - self.length)
            xs[i] = blob[s : s + self.length]
        return torch.from_numpy(xs), torch.from_numpy(ys)


class PooledClassifier(nn.Module):
    """A causal LM's backbone, mean-pooled over positions, then a linear ``head``."""

    def __init__(self, backbone: nn.Module, hidden: int, classes: int):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.backbone(input_ids=x).last_hidden_state.mean(dim=1))
