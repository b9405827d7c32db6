"""Layer-wise divergence from the pretrained weights (the paper's analysis).

>>> import torch
>>> from dizo import divergence, divergence_cv
>>> m = torch.nn.Linear(3, 3)
>>> anchor = {k: v.clone() for k, v in m.state_dict().items()}
>>> with torch.no_grad():
...     _ = m.weight.add_(1.0)
>>> d = divergence(m, anchor)
>>> round(d["weight"][0], 6), round(d["weight"][1], 6)
(3.0, 1.0)
"""

from __future__ import annotations

import re

import torch
from torch import nn


def divergence(
    model: nn.Module, anchor: dict[str, torch.Tensor], include: str | None = None
) -> dict:
    """``{name: (||d||, ||d|| / sqrt(numel), ||d|| / ||anchor||)}`` with ``d = theta - anchor``.

    ``anchor`` is a state dict (e.g. taken before fine-tuning); tensors missing from it, integer
    buffers and names not matching ``include`` are skipped. A shape mismatch raises ``ValueError``.
    """
    if not isinstance(anchor, dict):
        raise TypeError(f"anchor: expected a state dict, got {type(anchor).__name__}")
    pat = re.compile(include) if include is not None else None
    out = {}
    for name, p in model.named_parameters():
        if name not in anchor or (pat is not None and not pat.search(name)):
            continue
        a = anchor[name]
        if a.shape != p.shape:
            raise ValueError(
                f"anchor[{name!r}]: expected shape {tuple(p.shape)}, got {tuple(a.shape)}"
            )
        d = (p.detach().double().cpu() - a.double().cpu()).norm().item()
        ref = a.double().norm().item()
        out[name] = (d, d / p.numel() ** 0.5, d / ref if ref > 0 else float("inf"))
    return out


def divergence_cv(div: dict, which: int = 1) -> float:
    """Coefficient of variation (std / mean) across tensors of one divergence measure (default: per sqrt numel)."""
    vals = torch.tensor([v[which] for v in div.values()], dtype=torch.float64)
    if vals.numel() < 2:
        raise ValueError(f"div: expected at least 2 tensors, got {vals.numel()}")
    return float(vals.std(unbiased=False) / vals.mean())
