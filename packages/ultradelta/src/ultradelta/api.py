"""What a user touches: take the delta of a fine-tuned model against its base, compress a list
of deltas with the UltraDelta pipeline, and apply a compressed delta back onto the base."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import torch

from .packed import CompressedDelta, CompressedTensor
from .stages import (
    _check_rates,
    allocate_sparsity,
    bernoulli_prune,
    check_bits,
    check_float,
    fake_quant,
    groupwise_prune,
    quantize_codes,
    trace_norm_factors,
)

__all__ = ["DEFAULT_INCLUDE", "UltraDeltaConfig", "apply_deltas", "compress", "compute_deltas"]

#: The default scope: 2-D ``nn.Linear`` weights inside the transformer blocks (``layers.N.``).
DEFAULT_INCLUDE = r"(^|\.)(layers|h|blocks|block|layer)\.\d+\..*\.weight$"


def _f32(x) -> float:
    return float(np.float32(float(x)))


@dataclasses.dataclass(frozen=True)
class UltraDeltaConfig:
    """The pipeline's settings; defaults are the official ``run.sh`` (s = 0.97, b = 4, step 0.01).

    ``quantize`` (min-max b-bit), ``mixed`` (MSA), ``trace_norm`` (TNGR) and ``distribution_aware``
    (DAC; off = Bernoulli drop after quantisation) switch the stages for ablations.
    """

    sparsity: float = 0.97
    bits: int = 4
    step: float = 0.01
    extra_scale: float = 1.0
    quantize: bool = True
    mixed: bool = True
    trace_norm: bool = True
    distribution_aware: bool = True
    seed: int = 0

    def __post_init__(self):
        _check_rates(self.sparsity, self.step)
        check_bits(self.bits)
        if not self.extra_scale > 0:
            raise ValueError(f"extra_scale: expected > 0, got {self.extra_scale}")


def compute_deltas(
    pre_sd: dict[str, torch.Tensor],
    ft_sd: dict[str, torch.Tensor],
    include: str | None = None,
) -> dict[str, torch.Tensor]:
    """Delta = fine-tuned - pretrained (fp32) for the tensors whose name matches ``include``.

    Args:
        pre_sd, ft_sd: state dicts with the same keys and shapes.
        include: a regex over names (default :data:`DEFAULT_INCLUDE`: 2-D block weights).

    Example:
        >>> import torch
        >>> pre = {
        ...     "model.layers.0.mlp.up_proj.weight": torch.zeros(2, 2),
        ...     "model.norm.weight": torch.ones(2),
        ... }
        >>> ft = {k: v + 1 for k, v in pre.items()}
        >>> list(compute_deltas(pre, ft))
        ['model.layers.0.mlp.up_proj.weight']
    """
    if set(pre_sd) != set(ft_sd):
        diff = sorted(set(pre_sd) ^ set(ft_sd))[:5]
        raise ValueError(f"ft_sd: keys differ from pre_sd (e.g. {diff})")
    pattern = re.compile(include or DEFAULT_INCLUDE)
    out = {}
    for k, v in pre_sd.items():
        if not pattern.search(k) or v.dim() != 2 or not v.is_floating_point():
            continue
        if ft_sd[k].shape != v.shape:
            raise ValueError(
                f"ft_sd[{k!r}]: shape {tuple(ft_sd[k].shape)}, pre_sd has {tuple(v.shape)}"
            )
        out[k] = ft_sd[k].float() - v.float()
    if not out:
        raise ValueError(f"include: no 2-D float tensor of pre_sd matches {pattern.pattern!r}")
    return out


def _check_deltas(deltas_list) -> list[dict[str, torch.Tensor]]:
    if isinstance(deltas_list, dict):
        deltas_list = [deltas_list]
    if not isinstance(deltas_list, (list, tuple)) or not deltas_list:
        raise TypeError("deltas_list: expected a non-empty list of dicts of tensors")
    for i, d in enumerate(deltas_list):
        if not isinstance(d, dict) or not d:
            raise TypeError(f"deltas_list[{i}]: expected a non-empty dict of tensors")
        for k, v in d.items():
            check_float(v, f"deltas_list[{i}][{k!r}]")
    return list(deltas_list)


def compress(
    deltas_list: list[dict[str, torch.Tensor]] | dict[str, torch.Tensor],
    cfg: UltraDeltaConfig | None = None,
    reference: bool = False,
) -> list[CompressedDelta]:
    """The UltraDelta pipeline: quantize -> MSA -> DAC prune + global 1/(1-s) rescale -> TNGR.

    Args:
        deltas_list: one dict per task (all tasks share one base; TNGR spans them).
        cfg: :class:`UltraDeltaConfig`.
        reference: use the official per-level loop for pruning and fp64 nuclear norms.

    Returns:
        One :class:`CompressedDelta` per task; ``.to_dense()`` is what :func:`apply_deltas` adds.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> d = {"w": torch.randn(64, 64, generator=g)}
        >>> (c,) = compress([d])
        >>> round(c.ratio("entropy"), 1) > 40
        True
    """
    cfg = cfg or UltraDeltaConfig()
    deltas_list = _check_deltas(deltas_list)
    gen = torch.Generator().manual_seed(cfg.seed)
    levels = 2**cfg.bits - 1
    pruned_list = []
    for delta in deltas_list:
        q = {
            k: fake_quant(v.float(), cfg.bits) if cfg.quantize else v.float()
            for k, v in delta.items()
        }
        if cfg.mixed:
            rates = allocate_sparsity(q, cfg.sparsity, cfg.step)
        else:
            rates = {k: cfg.sparsity for k in q}
        pruned = {}
        for k, v in q.items():
            if cfg.distribution_aware:
                pruned[k] = groupwise_prune(v, rates[k], gen, reference=reference)
            else:
                pruned[k] = bernoulli_prune(v, rates[k], gen)
        pruned_list.append(pruned)
    rescale = cfg.extra_scale / (1.0 - cfg.sparsity)
    if cfg.trace_norm and len(pruned_list) > 1:
        gammas = trace_norm_factors(
            [{k: v * rescale for k, v in p.items()} for p in pruned_list],
            reference=reference,
        )
    else:
        gammas = [1.0] * len(pruned_list)
    out = []
    for delta, pruned, gamma in zip(deltas_list, pruned_list, gammas):
        tensors = {}
        for k, v in pruned.items():
            flat = v.reshape(-1)
            idx = torch.nonzero(flat, as_tuple=True)[0]
            scale = _f32(rescale * gamma)
            if cfg.quantize:
                codes, lo, hi = quantize_codes(delta[k].float(), cfg.bits)
                lo, hi = _f32(lo), _f32(hi)
                if hi == lo:  # constant tensor: one level, store it as fp16 values instead
                    tensors[k] = CompressedTensor(
                        tuple(v.shape), idx, None, flat[idx].half(), 16, 0.0, 0.0, scale
                    )
                    continue
                tensors[k] = CompressedTensor(
                    tuple(v.shape), idx, codes.reshape(-1)[idx], None, cfg.bits, lo, hi, scale
                )
            else:
                tensors[k] = CompressedTensor(
                    tuple(v.shape), idx, None, flat[idx].half(), 16, 0.0, 0.0, scale
                )
        out.append(
            CompressedDelta(tensors, {**dataclasses.asdict(cfg), "gamma": gamma, "levels": levels})
        )
    return out


def apply_deltas(
    pre_sd: dict[str, torch.Tensor],
    deltas: CompressedDelta | dict[str, torch.Tensor],
    others: str = "drop",
    ft_sd: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """A new state dict: base + delta on the compressed tensors; for every other tensor either the
    base value (``others="drop"``, the official behaviour: their deltas are dropped) or the
    fine-tuned value from ``ft_sd`` (``others="keep"``, they stay dense and uncompressed).

    Load the result with ``model.load_state_dict(...)`` into any transformers model. Keys or shapes
    of ``deltas`` that do not fit ``pre_sd`` are refused before anything is built.
    """
    if others not in ("drop", "keep"):
        raise ValueError(f"others: expected 'drop' or 'keep', got {others!r}")
    if others == "keep" and ft_sd is None:
        raise ValueError(
            "ft_sd: others='keep' needs the fine-tuned state dict for the dense tensors"
        )
    dense = deltas.to_dense() if isinstance(deltas, CompressedDelta) else deltas
    if not isinstance(dense, dict):
        raise TypeError(
            f"deltas: expected a CompressedDelta or a dict, got {type(deltas).__name__}"
        )
    for k, v in dense.items():
        if k not in pre_sd:
            raise ValueError(f"deltas: key {k!r} is not in pre_sd")
        if tuple(v.shape) != tuple(pre_sd[k].shape):
            raise ValueError(
                f"deltas[{k!r}]: shape {tuple(v.shape)} does not fit pre_sd's {tuple(pre_sd[k].shape)}"
            )
        check_float(v, f"deltas[{k!r}]")
    out = {}
    for k, base in pre_sd.items():
        if k in dense:
            out[k] = (base.float() + dense[k].float()).to(base.dtype)
        elif others == "keep":
            out[k] = ft_sd[k].clone()
        else:
            out[k] = base.clone()
    return out
