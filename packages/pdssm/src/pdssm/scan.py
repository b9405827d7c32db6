"""Torch implementations of the PD scan used by :func:`pdssm.pd_scan` (forward values only).

* :func:`sequential_states`: one O(B·N) scatter/gather step per time step; on CPU this is the
  fastest path (per-step kernel overhead is small and the work is O(L·N)).
* :func:`parallel_states`: a Hillis–Steele inclusive scan over ``(p, d, b)`` triples with the
  O(N) combine of :func:`pdssm.reference.combine`: ``⌈log2 L⌉`` rounds, O(L·N·log L) work, every
  round a handful of batched gathers/scatters. This is the shape of the computation a GPU wants;
  on a CPU it loses to the loop (see the README's speed table).

Gradients are not taken through these functions: :mod:`pdssm.ops` wraps them in one
``torch.autograd.Function`` whose backward is the reverse scan (run through the same functions).
"""

from __future__ import annotations

import torch

from .reference import apply_transition, combine

__all__ = ["parallel_states", "sequential_states"]


@torch.no_grad()
def sequential_states(
    p: torch.Tensor, d: torch.Tensor, b: torch.Tensor, x0: torch.Tensor, orientation: str
) -> torch.Tensor:
    """States ``x_1..x_L`` by a loop over time, written into one preallocated buffer.

    Args:
        p: int64 (B, L, N); d, b: complex (B, L, N); x0: complex (B, N);
        orientation: ``"column"`` or ``"row"``.

    Returns:
        complex (B, L, N).
    """
    out = torch.empty_like(b)
    x = x0
    for t in range(b.shape[1]):
        x = apply_transition(p[:, t], d[:, t], x, orientation).add_(b[:, t])
        out[:, t] = x
    return out


@torch.no_grad()
def parallel_states(
    p: torch.Tensor, d: torch.Tensor, b: torch.Tensor, x0: torch.Tensor, orientation: str
) -> torch.Tensor:
    """States ``x_1..x_L`` by a Hillis–Steele scan over ``(p, d, b)`` (depth ⌈log2 L⌉).

    ``x0`` is folded into the first element's offset (``b_1 ← A_1 x0 + b_1``), so the inclusive
    scan's offsets are the states.

    Args:
        p: int64 (B, L, N); d, b: complex (B, L, N); x0: complex (B, N);
        orientation: ``"column"`` or ``"row"``.

    Returns:
        complex (B, L, N).
    """
    length = b.shape[1]
    b = b.clone()
    b[:, 0] += apply_transition(p[:, 0], d[:, 0], x0, orientation)
    offset = 1
    while offset < length:
        earlier = (p[:, :-offset], d[:, :-offset], b[:, :-offset])
        later = (p[:, offset:], d[:, offset:], b[:, offset:])
        last_round = 2 * offset >= length
        if last_round:
            # Only the offsets are read after the last round: skip composing p and d.
            b = torch.cat([b[:, :offset], _offset_only(earlier, later, orientation)], dim=1)
        else:
            p_new, d_new, b_new = combine(earlier, later, orientation)
            p = torch.cat([p[:, :offset], p_new], dim=1)
            d = torch.cat([d[:, :offset], d_new], dim=1)
            b = torch.cat([b[:, :offset], b_new], dim=1)
        offset *= 2
    return b


def _offset_only(earlier, later, orientation: str) -> torch.Tensor:
    """The ``b`` part of :func:`combine` alone: ``A_j b_i + b_j``."""
    _, _, b_i = earlier
    p_j, d_j, b_j = later
    return apply_transition(p_j, d_j, b_i, orientation) + b_j
