"""The three UltraDelta stages, vectorised, with argument checks and a ``reference=True`` switch.

Order in the official code (kept here): quantize -> allocate (MSA) -> prune (DAC) + global rescale
-> trace-norm rescaling (TNGR). See :mod:`ultradelta.reference` for the loop versions.
"""

from __future__ import annotations

import math

import torch

from . import reference as ref

__all__ = [
    "allocate_sparsity",
    "bernoulli_prune",
    "check_bits",
    "check_float",
    "dequantize_codes",
    "fake_quant",
    "groupwise_prune",
    "quantize_codes",
    "trace_norm_factors",
    "trace_norms",
]


def check_bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise TypeError(f"bits: expected an int in 1..8, got {type(bits).__name__}")
    if not 1 <= bits <= 8:
        raise ValueError(f"bits: expected an int in 1..8, got {bits}")


def check_float(t: torch.Tensor, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
    if t.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty tensor, got shape {tuple(t.shape)}")


def quantize_codes(t: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Min-max uniform codes: ``codes = round((t - lo) / (hi - lo) * (2^b - 1))`` (half-to-even).

    Args:
        t: any float tensor.
        bits: 1..8.

    Returns:
        ``(codes uint8 of t's shape, lo, hi)``, lo/hi 0-d tensors of t's dtype. A constant tensor
        gets codes 0 and lo == hi (no division by zero).

    Example:
        >>> import torch
        >>> codes, lo, hi = quantize_codes(torch.tensor([0.0, 0.4, 1.0]), bits=2)
        >>> codes.tolist(), float(lo), float(hi)
        ([0, 1, 3], 0.0, 1.0)
    """
    check_float(t, "t")
    check_bits(bits)
    lo, hi = t.min(), t.max()
    if hi == lo:
        return torch.zeros(t.shape, dtype=torch.uint8), lo, hi
    levels = 2**bits - 1
    codes = torch.round((t - lo) / (hi - lo) * levels)
    return codes.to(torch.uint8), lo, hi


def dequantize_codes(codes: torch.Tensor, lo, hi, bits: int, dtype=torch.float32) -> torch.Tensor:
    """``lo + codes * (hi - lo) / (2^b - 1)`` in ``dtype`` (the spec's formula, in that order)."""
    lo = torch.as_tensor(lo, dtype=dtype)
    hi = torch.as_tensor(hi, dtype=dtype)
    step = (hi - lo) / (2**bits - 1)
    return lo + codes.to(dtype) * step


def fake_quant(t: torch.Tensor, bits: int) -> torch.Tensor:
    """Quantize then dequantize immediately (zero is generally not a level).

    Example:
        >>> import torch
        >>> fake_quant(torch.tensor([0.0, 0.4, 1.0]), bits=2).tolist()
        [0.0, 0.3333333432674408, 1.0]
    """
    codes, lo, hi = quantize_codes(t, bits)
    if hi == lo:
        return t.clone()
    return dequantize_codes(codes, lo, hi, bits, dtype=t.dtype)


def _check_rates(target: float, step: float) -> None:
    if not isinstance(target, (int, float)) or not 0.0 <= target < 1.0:
        raise ValueError(f"sparsity: expected a float in [0, 1), got {target!r}")
    if not isinstance(step, (int, float)) or step < 0:
        raise ValueError(f"step: expected a float >= 0, got {step!r}")
    if target + step > 1.0:
        raise ValueError(f"sparsity + step: expected <= 1, got {target} + {step} = {target + step}")


def allocate_sparsity(
    delta: dict[str, torch.Tensor], target: float, step: float = 0.01
) -> dict[str, float]:
    """Variance-based mixed sparsity allocation (MSA), as in the official code.

    Tensors are sorted by population std (ascending, stable); walking the sorted list with the
    cumulative parameter count c (current tensor included), those with c <= N/3 get
    ``target + step``, those with c <= 2N/3 get ``target``, the rest get the balancing rate
    ``clip((s N - s N_mid - (s + step) N_low) / N_high, 0, 0.99)``.

    Example:
        >>> import torch
        >>> d = {"a": torch.zeros(10), "b": torch.arange(10.0), "c": 10 * torch.arange(10.0)}
        >>> {k: round(v, 4) for k, v in allocate_sparsity(d, 0.5, 0.1).items()}
        {'a': 0.6, 'b': 0.5, 'c': 0.4}
    """
    if not isinstance(delta, dict) or not delta:
        raise TypeError("deltas: expected a non-empty dict of tensors")
    for k, v in delta.items():
        check_float(v, f"deltas[{k!r}]")
    _check_rates(target, step)
    return ref.allocate_sparsity_reference(delta, float(target), float(step))


def _level_rate(flat: torch.Tensor, rate: float) -> float:
    zeros = float((flat == 0).sum()) / flat.numel()
    if zeros >= 1.0:
        return 0.0
    return max(0.0, (rate - zeros) / (1 - zeros))


def groupwise_prune(
    t: torch.Tensor,
    rate: float,
    generator: torch.Generator | None = None,
    reference: bool = False,
) -> torch.Tensor:
    """Distribution-aware pruning (DAC): zero ``round(n_v * r)`` entries of every distinct value v.

    r = max(0, (rate - z) / (1 - z)) with z the fraction of exact zeros already present, so the
    tensor ends at sparsity ``rate`` and every level keeps ``n_v - round(n_v r)`` entries (the
    value histogram keeps its shape). Vectorised: one uniform key per element, a stable sort by
    (level, key), the first ``round(n_v r)`` of each level dropped. ``reference=True`` runs the
    official loop (``torch.unique`` order, ``torch.randperm`` on ``generator``). Any rank.

    Example:
        >>> import torch
        >>> t = torch.tensor([1.0, 1.0, 2.0, 2.0, 2.0, 2.0])
        >>> g = torch.Generator().manual_seed(0)
        >>> int((groupwise_prune(t, 0.5, g) != 0).sum())
        3
    """
    check_float(t, "t")
    if not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate: expected a float in [0, 1], got {rate!r}")
    if reference:
        return ref.groupwise_prune_reference(t, float(rate), generator)
    flat = t.reshape(-1)
    r = _level_rate(flat, float(rate))
    if r == 0.0:
        return t.clone()
    _values, inverse, counts = torch.unique(flat, return_inverse=True, return_counts=True)
    keys = torch.rand(flat.numel(), generator=generator, dtype=torch.float64)
    # one sort on level + key (key in [0, 1), exact in float64 for up to 2^24 levels) is the
    # stable sort by (level, key)
    order = torch.argsort(inverse.reshape(-1).double() + keys)
    starts = torch.cumsum(counts, 0) - counts
    group = inverse.reshape(-1)[order]
    rank = torch.arange(flat.numel()) - starts[group]
    remove = torch.round(counts.double() * r).long()  # half-to-even, like Python's round
    drop = order[rank < remove[group]]
    out = flat.clone()
    out[drop] = 0
    return out.reshape(t.shape)


def bernoulli_prune(
    t: torch.Tensor, rate: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The DAC-off ablation: drop each entry independently with the same adjusted rate r."""
    check_float(t, "t")
    flat = t.reshape(-1)
    r = _level_rate(flat, float(rate))
    keep = torch.rand(flat.numel(), generator=generator, dtype=torch.float64) >= r
    return (flat * keep).reshape(t.shape)


def trace_norms(
    deltas_list: list[dict[str, torch.Tensor]], dtype: torch.dtype | None = None
) -> list[float]:
    """T_k = sum of nuclear norms of the 2-D tensors of task k (``svdvals`` in ``dtype``)."""
    out = []
    for delta in deltas_list:
        total = 0.0
        for v in delta.values():
            if v.dim() == 2:
                x = v if dtype is None else v.to(dtype)
                total += float(torch.linalg.svdvals(x).sum())
        out.append(total)
    return out


def trace_norm_factors(
    deltas_list: list[dict[str, torch.Tensor]],
    reference: bool = False,
    dtype: torch.dtype | None = None,
) -> list[float]:
    """TNGR: gamma_k = (mean T / T_k) / max_j (mean T / T_j) = min_j T_j / T_k; 1 for one task.

    Example:
        >>> import torch
        >>> a = {"w": torch.eye(3)}
        >>> b = {"w": 2 * torch.eye(3)}
        >>> trace_norm_factors([a, b])
        [1.0, 0.5]
    """
    if not isinstance(deltas_list, (list, tuple)) or not deltas_list:
        raise TypeError("deltas_list: expected a non-empty list of dicts of tensors")
    if reference:
        return ref.trace_norm_factors_reference(list(deltas_list))
    norms = trace_norms(list(deltas_list), dtype=dtype)
    smallest = min(norms)
    return (
        [smallest / n if n > 0 else 1.0 for n in norms]
        if smallest > 0
        else [1.0 if n == 0 else 0.0 for n in norms]
    )


def entropy_bits(p: float) -> float:
    """Binary entropy H2(p) in bits."""
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
