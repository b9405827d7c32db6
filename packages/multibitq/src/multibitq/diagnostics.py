"""Diagnostics of a multi-bit model: pre-BN activation mismatch and gradient angles.

- :func:`activation_mismatch`: per BatchNorm, ``mean_c(|μ_b,c − μ_32,c|/σ_32,c + |log(σ_b,c/σ_32,c)|)``
  over the pre-BN activations (population statistics over batch and space, float64), the child at
  ``bits`` against the 32-bit child on the same inputs, eval mode. 0 means one BatchNorm could
  serve both children as it is (the paper's Fig. 3 motivation).
- :func:`gradient_angles`: per quantized layer, the angle in degrees between the gradients of the
  shared weight from two children on the same batch (the paper's Fig. 4: < 28°).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from multibitq.data import _batches
from multibitq.modules import SwitchableBatchNorm2d, _check_model, _QuantizedWeight, using_bits
from multibitq.ops import check_bits
from multibitq.reference import FULL_PRECISION

__all__ = ["activation_mismatch", "gradient_angles"]

#: Guards σ of a channel that is constant over the data.
_STD_EPS = 1e-12


def _norm_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Every BatchNorm of the model, a SwitchableBatchNorm2d counted once (not its children)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, SwitchableBatchNorm2d) or (
            type(m) is nn.BatchNorm2d
            and not any(
                name.startswith(f"{s}.") for s in out if isinstance(out[s], SwitchableBatchNorm2d)
            )
        ):
            out[name] = m
    return out


def _pre_bn_moments(
    model: nn.Module, batches: list[torch.Tensor], bits: int
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    layers = _norm_layers(model)
    sums: dict[str, list[Any]] = {}

    def hook(name):
        def fn(module, args, output):
            x = args[0].detach().double().transpose(0, 1).reshape(args[0].shape[1], -1)
            s = sums.setdefault(name, [0, 0.0, 0.0])
            s[0] += x.shape[1]
            s[1] = s[1] + x.sum(1)
            s[2] = s[2] + x.square().sum(1)

        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in layers.items()]
    try:
        with torch.no_grad(), using_bits(model, bits):
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    out = {}
    for name, (count, s1, s2) in sums.items():
        mean = s1 / count
        var = (s2 / count - mean.square()).clamp_min(0)
        out[name] = (mean, var.sqrt())
    return out


def activation_mismatch(
    model: nn.Module, loader: Any, bits: int, num_batches: int | None = None
) -> dict[str, float]:
    """Per BatchNorm name: the pre-BN activation mismatch of the child at ``bits`` vs 32 bits.

    Args:
        model: a model made multi-bit by :func:`convert_`; run in eval mode (restored after).
        loader: an iterable of inputs or ``(x, y)`` batches.
        bits: the child to compare with the 32-bit child (1–8 or 32).
        num_batches: use at most this many batches.

    Returns:
        ``{bn_name: mean_c(|μ_b − μ_32|/σ_32 + |log σ_b/σ_32|)}``; 0 everywhere at ``bits=32``.
    """
    _check_model(model)
    bits = check_bits(bits)
    batches = list(_batches(loader, num_batches))
    if not batches:
        raise ValueError("loader: yielded no batch")
    was_training = model.training
    try:
        model.eval()
        ref = _pre_bn_moments(model, batches, FULL_PRECISION)
        child = ref if bits == FULL_PRECISION else _pre_bn_moments(model, batches, bits)
    finally:
        model.train(was_training)
    out = {}
    for name, (mu_r, sd_r) in ref.items():
        mu_b, sd_b = child[name]
        sd_r, sd_b = sd_r.clamp_min(_STD_EPS), sd_b.clamp_min(_STD_EPS)
        out[name] = float(((mu_b - mu_r).abs() / sd_r + (sd_b / sd_r).log().abs()).mean())
    return out


def gradient_angles(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], bits: Iterable[int]
) -> dict[str, dict[tuple[int, int], float]]:
    """Per quantized layer: angles (degrees) between the children's gradients of its weight.

    Each child's cross-entropy gradient is taken on the same ``(x, y)`` batch in the model's
    current mode; parameters, their ``.grad`` and every buffer (BN statistics) are left as they
    were.

    Returns:
        ``{layer_name: {(b1, b2): degrees}}`` for every pair ``b1 > b2`` of ``bits``.
    """
    _check_model(model)
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise ValueError("batch: expected a pair (x, y) of inputs and integer labels")
    x, y = batch
    if not isinstance(y, torch.Tensor) or y.is_floating_point():
        raise ValueError("batch: expected integer class labels as its second element")
    if isinstance(bits, (str, bytes)) or not isinstance(bits, Iterable):
        raise TypeError(f"bits: expected a sequence of bit-widths, got {bits!r}")
    bits = sorted({check_bits(b) for b in bits}, reverse=True)
    if len(bits) < 2:
        raise ValueError(f"bits: expected at least two distinct bit-widths, got {bits}")
    layers = {n: m for n, m in model.named_modules() if isinstance(m, _QuantizedWeight)}
    weights = [m.weight for m in layers.values()]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    grads: dict[int, tuple[torch.Tensor, ...]] = {}
    try:
        with torch.enable_grad():
            for b in bits:
                with using_bits(model, b):
                    loss = F.cross_entropy(model(x), y)
                grads[b] = torch.autograd.grad(loss, weights)
    finally:
        model.load_state_dict(saved)
    out: dict[str, dict[tuple[int, int], float]] = {}
    for i, name in enumerate(layers):
        out[name] = {}
        for b1, b2 in itertools.combinations(bits, 2):
            g1, g2 = grads[b1][i].reshape(-1).double(), grads[b2][i].reshape(-1).double()
            denom = g1.norm() * g2.norm()
            cosine = float((g1 @ g2) / denom) if denom > 0 else float("nan")
            out[name][(b1, b2)] = math.degrees(math.acos(max(-1.0, min(1.0, cosine))))
    return out
