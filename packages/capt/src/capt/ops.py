"""Public ops of capt: argument checks and the batched torch paths of the capsule math.

No Triton kernel: CaPT adds O(T·d) for the masked mean and O(L·k·d) for the slot writes, negligible
beside the layers it feeds (spec, section 3). ``backend="reference"`` runs :mod:`capt.reference`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .reference import capsule_forward_reference

__all__ = [
    "BACKENDS",
    "FUSIONS",
    "INSTANCE_SOURCES",
    "capsule_forward",
    "capsule_slots",
    "check_alpha",
    "instance_semantics",
    "write_slots",
]

BACKENDS = ("torch", "reference")
FUSIONS = ("add", "concat", "prepend")
INSTANCE_SOURCES = ("embedding", "hidden", "none")


def _float_tensor(name: str, x, ndim: int | tuple[int, ...]) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if x.dim() not in dims:
        raise ValueError(
            f"{name}: expected {' or '.join(map(str, dims))} dimensions, got shape {tuple(x.shape)}"
        )


def _mask(name: str, mask, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(mask).__name__}")
    if mask.is_complex():
        raise TypeError(f"{name}: expected a bool, integer or real tensor, got {mask.dtype}")
    if tuple(mask.shape) != shape:
        raise ValueError(
            f"{name}: expected shape {shape} (like the input ids), got {tuple(mask.shape)}"
        )
    if mask.device != device:
        raise ValueError(f"{name}: expected device {device}, got {mask.device}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name}: expected 0/1 entries")
    return mask


def check_alpha(alpha) -> float:
    """α as a finite float; a bool, a non-number or a NaN/Inf is refused naming ``alpha``."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha: expected a real number, got {type(alpha).__name__}")
    if not math.isfinite(alpha):
        raise ValueError(f"alpha: expected a finite number, got {alpha}")
    return float(alpha)


def instance_semantics(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``s_b = Σ_t m_{b,t} e_{b,t} / Σ_t m_{b,t}``: the instance part of the capsule.

    Accumulated in float32 (float64 inputs stay float64), whatever the input dtype, because a bf16
    sum over hundreds of tokens loses precision (spec, pitfalls).

    Args:
        embeds: ``[B, T, d]`` frozen input embeddings (or normed hidden states).
        mask: ``[B, T]`` 0/1 instance mask: source tokens only, never padding or targets. A row
            without a source token is refused (the capsule would carry no instance).

    Returns:
        ``[B, d]`` in float32 (float64 for float64 inputs).

    Example:
        >>> e = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])
        >>> instance_semantics(e, torch.tensor([[1, 1, 0]]))
        tensor([[2., 3.]])
    """
    _float_tensor("embeds", embeds, 3)
    mask = _mask("mask", mask, tuple(embeds.shape[:2]), embeds.device)
    counts = mask.sum(1)
    if bool((counts == 0).any()):
        rows = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(
            f"mask: rows {rows} select no source token (an all-zero instance-mask row)"
        )
    acc = torch.float64 if embeds.dtype == torch.float64 else torch.float32
    m = mask.to(acc)
    return torch.einsum("bt,btd->bd", m, embeds.to(acc)) / m.sum(1, keepdim=True)


def capsule_slots(
    prompts: torch.Tensor,
    semantics: torch.Tensor | None,
    alpha: float = 1.0,
    fusion: str = "add",
) -> torch.Tensor:
    """One layer's slots: ``p^{(j)} + α s`` (``"add"``), ``[p; α s]`` (``"concat"``) or ``[α s; p]``.

    ``"prepend"`` is Finding II's layout: one training-free instance token in front of (trained)
    prompt-tuning slots that do not receive ``s`` themselves.

    Args:
        prompts: ``[k, d]`` the task-aware ``p_ℓ``.
        semantics: ``[B, d]`` instance semantics ``s``, or ``None`` (deep prompt tuning: the slots
            are the prompts, returned with a broadcastable batch dimension of 1).
        alpha: α, finite.
        fusion: ``"add"`` (k slots), ``"concat"`` (k + 1 slots, ``α s`` last) or ``"prepend"``
            (k + 1 slots, ``α s`` first).

    Returns:
        ``[B, k', d]`` in the promoted dtype of ``prompts`` and ``semantics``.
    """
    alpha = check_alpha(alpha)
    if fusion not in FUSIONS:
        raise ValueError(f"fusion: expected one of {FUSIONS}, got {fusion!r}")
    _float_tensor("prompts", prompts, 2)
    if semantics is None:
        return prompts[None]
    _float_tensor("semantics", semantics, 2)
    if semantics.shape[1] != prompts.shape[1]:
        raise ValueError(
            f"semantics: expected width d={prompts.shape[1]}, got shape {tuple(semantics.shape)}"
        )
    if semantics.device != prompts.device:
        raise ValueError(f"semantics: expected device {prompts.device}, got {semantics.device}")
    dtype = torch.promote_types(prompts.dtype, semantics.dtype)
    p, s = prompts.to(dtype), alpha * semantics.to(dtype)
    if fusion == "add":
        return p[None] + s[:, None]
    parts = [p[None].expand(s.shape[0], -1, -1), s[:, None]]
    return torch.cat(parts if fusion == "concat" else parts[::-1], 1)


def write_slots(hidden: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``hidden`` with its first k' positions replaced by ``slots`` (out of place, differentiable).

    Args:
        hidden: ``[B, T, d]`` hidden states whose positions ``0..k'-1`` are the capsule slots.
        slots: ``[B or 1, k', d]``; cast to ``hidden.dtype``.
    """
    _float_tensor("hidden", hidden, 3)
    _float_tensor("slots", slots, 3)
    b, t, d = hidden.shape
    if slots.shape[0] not in (1, b) or slots.shape[2] != d or slots.shape[1] > t:
        raise ValueError(
            f"slots: expected shape ({b} or 1, k' <= {t}, {d}), got {tuple(slots.shape)}"
        )
    k = slots.shape[1]
    return torch.cat([slots.to(hidden.dtype).expand(b, -1, -1), hidden[:, k:]], 1)


def _layer_ids(layer_ids, n_layers: int, n_prompts: int) -> list[int]:
    if isinstance(layer_ids, (str, bytes)) or not isinstance(layer_ids, Sequence):
        raise TypeError(f"layer_ids: expected a sequence of ints, got {type(layer_ids).__name__}")
    ids = list(layer_ids)
    if not ids:
        raise ValueError("layer_ids: expected at least one layer")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"layer_ids: expected ints, got {type(i).__name__}")
        if not 0 <= i < n_layers:
            raise ValueError(f"layer_ids: layer {i} out of range for {n_layers} layers")
    if ids != sorted(set(ids)):
        raise ValueError(f"layer_ids: expected sorted unique indices, got {ids}")
    if len(ids) != n_prompts:
        raise ValueError(f"layer_ids: expected one per prompt row ({n_prompts}), got {len(ids)}")
    return ids


def capsule_forward(
    embeds: torch.Tensor,
    instance_mask: torch.Tensor,
    attention_mask: torch.Tensor,
    layers: Sequence[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]],
    prompts: torch.Tensor,
    layer_ids: Sequence[int],
    alpha: float = 1.0,
    fusion: str = "add",
    instance_source: str = "embedding",
    norms: Sequence[Callable[[torch.Tensor], torch.Tensor]] | None = None,
    backend: str = "torch",
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Run ``layers`` with CaPT's capsule slots, batched (the math the model hooks apply).

    Same contract as :func:`capt.reference.capsule_forward_reference`: the slots are prepended
    before the first token, initialised with the capsule of the first selected layer, and
    overwritten with ``c_ℓ`` entering every selected layer ℓ.

    Args:
        embeds: ``[B, T, d]`` input embeddings.
        instance_mask: ``[B, T]`` 0/1 source mask (no padding, no targets; no empty row).
        attention_mask: ``[B, T]`` 0/1 padding mask; the layers receive it with k' leading ones.
        layers: ``layer(h [B, k'+T, d], mask [B, k'+T]) -> h``.
        prompts: ``[len(layer_ids), k, d]`` trainable ``p_ℓ``, k >= 1.
        layer_ids: sorted unique indices into ``layers``.
        alpha: α, finite.
        fusion: ``"add"``, ``"concat"`` or ``"prepend"``.
        instance_source: ``"embedding"``, ``"hidden"`` or ``"none"``.
        norms: one callable per layer, required for ``instance_source="hidden"``.
        backend: ``"torch"`` (batched) or ``"reference"`` (float64 loop, returned in float64).

    Returns:
        ``(hidden [B, k'+T, d], entering)``: ``entering[ℓ]`` is the state entering layer ℓ.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if instance_source not in INSTANCE_SOURCES:
        raise ValueError(
            f"instance_source: expected one of {INSTANCE_SOURCES}, got {instance_source!r}"
        )
    if fusion not in FUSIONS:
        raise ValueError(f"fusion: expected one of {FUSIONS}, got {fusion!r}")
    if fusion != "add" and instance_source == "none":
        raise ValueError(
            f"fusion: {fusion!r} needs an instance source (instance_source='none' gives no s)"
        )
    alpha = check_alpha(alpha)
    _float_tensor("embeds", embeds, 3)
    _float_tensor("prompts", prompts, 3)
    if prompts.shape[1] < 1:
        raise ValueError(
            f"prompts: expected capsule_length k >= 1, got shape {tuple(prompts.shape)}"
        )
    if prompts.shape[2] != embeds.shape[2]:
        raise ValueError(
            f"prompts: expected width d={embeds.shape[2]}, got shape {tuple(prompts.shape)}"
        )
    shape = tuple(embeds.shape[:2])
    instance_mask = _mask("instance_mask", instance_mask, shape, embeds.device)
    attention_mask = _mask("attention_mask", attention_mask, shape, embeds.device)
    if bool((instance_mask.bool() & ~attention_mask.bool()).any()):
        raise ValueError("instance_mask: selects padding positions (attention_mask is 0 there)")
    if instance_source != "none" and bool((instance_mask.sum(1) == 0).any()):
        rows = torch.nonzero(instance_mask.sum(1) == 0).flatten().tolist()
        raise ValueError(f"instance_mask: rows {rows} select no source token (an all-zero row)")
    ids = _layer_ids(layer_ids, len(layers), prompts.shape[0])
    if instance_source == "hidden" and (norms is None or len(norms) != len(layers)):
        raise ValueError("norms: instance_source='hidden' needs one norm per layer")
    if backend == "reference":
        return capsule_forward_reference(
            embeds,
            instance_mask,
            attention_mask,
            layers,
            prompts,
            ids,
            alpha,
            fusion,
            instance_source,
            norms,
        )
    row = {lid: i for i, lid in enumerate(ids)}

    fixed = instance_semantics(embeds, instance_mask) if instance_source == "embedding" else None

    def semantics(h_src: torch.Tensor, ell: int) -> torch.Tensor | None:
        # "embedding": s of the input embeddings, the same for every layer; "hidden": s_ℓ.
        if instance_source != "hidden":
            return fixed
        return instance_semantics(norms[ell](h_src), instance_mask)

    # Before layer 0 the slots hold the capsule of the first selected layer, its s taken at layer 0.
    first = capsule_slots(prompts[0], semantics(embeds, 0), alpha, fusion)
    k = first.shape[1]
    b = embeds.shape[0]
    h = torch.cat([first.to(embeds.dtype).expand(b, -1, -1), embeds], 1)
    mask = torch.cat([attention_mask.new_ones(b, k), attention_mask], 1)
    entering = []
    for ell, layer in enumerate(layers):
        if ell in row:
            h = write_slots(
                h, capsule_slots(prompts[row[ell]], semantics(h[:, k:], ell), alpha, fusion)
            )
        entering.append(h)
        h = layer(h, mask)
    return h, entering
