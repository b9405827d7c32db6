"""Naive, readable reference implementations of capt: the spec in code (float64).

Every function computes in float64, one example at a time, with explicit sums and slot writes, so
the batched paths in :mod:`capt.ops` (and, later, the transformer hooks) can be checked against it
forward and backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["capsule_forward_reference", "instance_semantics_reference"]


def instance_semantics_reference(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``s_b = Σ_t m_{b,t} e_{b,t} / Σ_t m_{b,t}``, an explicit float64 loop: ``[B,T,d],[B,T] -> [B,d]``."""
    rows = []
    for b in range(embeds.shape[0]):
        total = torch.zeros(embeds.shape[-1], dtype=torch.float64, device=embeds.device)
        count = 0.0
        for t in range(embeds.shape[1]):
            if bool(mask[b, t]):
                total = total + embeds[b, t].double()
                count += 1.0
        rows.append(total / count)
    return torch.stack(rows)


def _slots(p: torch.Tensor, s: torch.Tensor | None, alpha: float, fusion: str) -> torch.Tensor:
    """One example's capsule slots ``[k', d]`` for one layer: ``p + α s``, ``[p; α s]``, ``[α s; p]``."""
    if s is None:
        return p.double()
    if fusion == "add":
        return torch.stack([p[j].double() + alpha * s for j in range(p.shape[0])])
    if fusion == "concat":
        return torch.cat([p.double(), (alpha * s)[None]])
    return torch.cat([(alpha * s)[None], p.double()])  # "prepend" (Finding II)


def _semantics(h_src, src, layer, instance_source, norms) -> torch.Tensor | None:
    """One example's ``s_ℓ`` from its ``[T, d]`` source-side states, or ``None`` (no instance)."""
    if instance_source == "none":
        return None
    if instance_source == "hidden":
        h_src = torch.stack([norms[layer](h_src[t]) for t in range(h_src.shape[0])])
    return instance_semantics_reference(h_src[None], src)[0]


def capsule_forward_reference(
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
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The CaPT layer loop of the spec, one example at a time in float64.

    The k' capsule slots are prepended before the first token; their content before layer 0 is the
    capsule of the first selected layer (with ``instance_source="hidden"``, its ``s`` is taken from
    the normed embeddings, ``norms[0]``) *(design)*. Entering every selected layer ℓ the slots are
    overwritten with ``c_ℓ = p_ℓ + α s_ℓ`` (``fusion="add"``; ``s_ℓ = s`` of the input embeddings
    for every ℓ under ``instance_source="embedding"``) or ``[p_ℓ; α s_ℓ]``
    (``fusion="concat"``); other layers are untouched.

    Args:
        embeds: ``[B, T, d]`` input embeddings (no slots).
        instance_mask: ``[B, T]`` source tokens (1) — never padding, never targets.
        attention_mask: ``[B, T]`` padding mask of the input; the slots get a leading 1.
        layers: ``layer(h [1, k'+T, d], mask [1, k'+T]) -> h``, called per example.
        prompts: ``[len(layer_ids), k, d]`` the trainable ``p_ℓ``.
        layer_ids: sorted selected layer indices.
        alpha: α.
        fusion: ``"add"``, ``"concat"`` or ``"prepend"``.
        instance_source: ``"embedding"``, ``"hidden"`` (masked mean of ``norms[ℓ](h_ℓ)`` over the
            source positions) or ``"none"`` (deep prompt tuning).
        norms: per-layer norms, needed for ``instance_source="hidden"``.

    Returns:
        ``(hidden [B, k'+T, d], entering)`` in float64, where ``entering[ℓ]`` is ``[B, k'+T, d]``,
        the hidden state entering layer ℓ (after any slot write).
    """
    selected = {lid: i for i, lid in enumerate(layer_ids)}
    first = layer_ids[0]
    outs, entering_rows = [], []
    for b in range(embeds.shape[0]):
        e = embeds[b].double()
        src = instance_mask[b : b + 1]

        s0 = _semantics(e, src, 0, instance_source, norms)
        slots = _slots(prompts[selected[first]], s0, alpha, fusion)
        k = slots.shape[0]
        h = torch.cat([slots, e])[None]
        mask = torch.cat(
            [torch.ones(1, k, dtype=attention_mask.dtype), attention_mask[b : b + 1]], 1
        )
        rows = []
        for ell, layer in enumerate(layers):
            if ell in selected:
                c = _slots(
                    prompts[selected[ell]],
                    _semantics(
                        h[0, k:] if instance_source == "hidden" else e,
                        src,
                        ell,
                        instance_source,
                        norms,
                    ),
                    alpha,
                    fusion,
                )
                h = h.clone()
                for j in range(k):
                    h[0, j] = c[j]
            rows.append(h[0])
            h = layer(h, mask)
        outs.append(h[0])
        entering_rows.append(rows)
    entering = [torch.stack([r[ell] for r in entering_rows]) for ell in range(len(layers))]
    return torch.stack(outs), entering
