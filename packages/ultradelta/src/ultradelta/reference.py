"""Naive, readable reference implementations of UltraDelta: the spec in code (float64-capable).

These follow the official loop (``xiaohuiwang000/UltraDelta``, ``src/ultradelta_compression.py``)
step by step: per-level pruning walks ``torch.unique`` order and draws ``torch.randperm`` on a
given generator. They are slow by design; :mod:`ultradelta.stages` holds the vectorised versions
and is tested against these.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "allocate_sparsity_reference",
    "fake_quant_reference",
    "groupwise_prune_reference",
    "trace_norm_factors_reference",
    "trace_norms_reference",
]


def fake_quant_reference(t: torch.Tensor, bits: int) -> torch.Tensor:
    """Min-max fake quantisation: lo + round((t - lo) / (hi - lo) * L) / L * (hi - lo), L = 2^b - 1.

    A constant tensor (hi == lo) is returned unchanged (the official code divides by zero there).
    """
    lo, hi = t.min(), t.max()
    if hi == lo:
        return t.clone()
    levels = 2**bits - 1
    codes = torch.round((t - lo) / (hi - lo) * levels)
    return codes / levels * (hi - lo) + lo


def allocate_sparsity_reference(
    delta: dict[str, torch.Tensor], target: float, step: float
) -> dict[str, float]:
    """Variance-based mixed sparsity: the third of parameters with the lowest std gets ``target + step``,
    the middle third ``target``, the rest the balancing rate clipped to [0, 0.99]."""
    sizes = {k: v.numel() for k, v in delta.items()}
    stds = {}
    for k, v in delta.items():
        if v.numel() > 1:
            x = v.double()
            stds[k] = float(((x - x.mean()) ** 2).mean().sqrt())
        else:
            stds[k] = 0.0
    order = sorted(delta, key=lambda k: stds[k])  # Python's sort is stable
    total = sum(sizes.values())
    rates: dict[str, float] = {}
    acc = n_low = n_mid = n_high = 0
    for k in order:
        acc += sizes[k]
        if acc <= total / 3:
            rates[k] = target + step
            n_low += sizes[k]
        elif acc <= 2 * total / 3:
            rates[k] = target
            n_mid += sizes[k]
        else:
            n_high += sizes[k]
    if n_high > 0:
        high = (target * total - target * n_mid - (target + step) * n_low) / n_high
        high = min(0.99, max(0.0, high))
    else:
        high = target
    for k in order:
        rates.setdefault(k, high)
    return {k: rates[k] for k in delta}


def groupwise_prune_reference(
    t: torch.Tensor, rate: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Distribution-aware pruning, the official loop: for every distinct value v (``torch.unique``
    order), zero ``round(n_v * r)`` of its entries chosen by ``torch.randperm``, where
    r = max(0, (rate - z) / (1 - z)) and z is the fraction of exact zeros already present."""
    flat = t.reshape(-1)
    zeros = float((flat == 0).sum()) / flat.numel()
    r = 1.0 if zeros >= 1.0 else max(0.0, (rate - zeros) / (1 - zeros))
    if r > 1.0:
        raise ValueError(f"rate: the per-level rate {r} exceeds 1")
    out = flat.clone()
    for value in torch.unique(flat):
        idx = (flat == value).nonzero(as_tuple=True)[0]
        remove = round(idx.numel() * r)
        perm = torch.randperm(idx.numel(), generator=generator)[:remove]
        out[idx[perm]] = 0
    return out.reshape(t.shape)


def trace_norms_reference(deltas_list: list[dict[str, torch.Tensor]]) -> list[float]:
    """T_k = sum over the 2-D tensors of task k of the nuclear norm (sum of singular values)."""
    norms = []
    for delta in deltas_list:
        total = 0.0
        for v in delta.values():
            if v.dim() == 2:
                total += float(torch.linalg.svdvals(v.double()).sum())
        norms.append(total)
    return norms


def trace_norm_factors_reference(deltas_list: list[dict[str, torch.Tensor]]) -> list[float]:
    """gamma_k = (mean T / T_k) / max_j (mean T / T_j) = min_j T_j / T_k (1 for a single task)."""
    norms = trace_norms_reference(deltas_list)
    mean = sum(norms) / len(norms)
    raw = [mean / n if n > 0 else math.inf for n in norms]
    top = max(raw)
    if not math.isfinite(top):
        return [1.0 if not math.isfinite(x) else 0.0 for x in raw]
    return [x / top for x in raw]
