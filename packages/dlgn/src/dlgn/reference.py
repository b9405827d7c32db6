"""Naive, readable reference implementations of dlgn: the spec in code (float64-capable).

Nothing here is fast; the tests hold the fast paths to these.
"""

from __future__ import annotations

import torch

__all__ = [
    "bernoulli_expectation",
    "dense_layer",
    "gate",
    "gumbel_st_grad",
    "unused_mask",
]


def gate(i: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Gate ``i`` relaxed, written out as in the spec's table (as ``difflogic``'s ``bin_op``).

    Example:
        >>> gate(9, torch.tensor(1.0), torch.tensor(1.0)).item()  # XNOR(1, 1)
        1.0
    """
    formulas = {
        0: lambda: torch.zeros_like(a),
        1: lambda: a * b,
        2: lambda: a - a * b,
        3: lambda: a.clone(),
        4: lambda: b - a * b,
        5: lambda: b.clone(),
        6: lambda: a + b - 2 * a * b,
        7: lambda: a + b - a * b,
        8: lambda: 1 - a - b + a * b,
        9: lambda: 1 - a - b + 2 * a * b,
        10: lambda: 1 - b,
        11: lambda: 1 - b + a * b,
        12: lambda: 1 - a,
        13: lambda: 1 - a + a * b,
        14: lambda: 1 - a * b,
        15: lambda: torch.ones_like(a),
    }
    if i not in formulas:
        raise ValueError(f"i: expected a gate id in 0..15, got {i!r}")
    return formulas[i]()


def bernoulli_expectation(i: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``E[f_i(A, B)]`` with ``A ~ Bernoulli(a)``, ``B ~ Bernoulli(b)`` independent, by enumeration
    of the four input pairs; ``f_i(p, q)`` is bit ``3 - (2p + q)`` of the id."""
    out = torch.zeros_like(a)
    for p in (0, 1):
        for q in (0, 1):
            bit = (i >> (3 - (2 * p + q))) & 1
            pa = a if p else 1 - a
            pb = b if q else 1 - b
            out = out + bit * pa * pb
    return out


def dense_layer(
    x: torch.Tensor, ia: torch.Tensor, ib: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """The layer as a dense sum ``y[:, n] = Σ_i w[n, i]·h_i(x[:, ia[n]], x[:, ib[n]])``.

    Args:
        x: (B, in).
        ia, ib: (out,) indices.
        w: (out, 16) weights.

    Returns:
        (B, out).
    """
    a, b = x[:, ia], x[:, ib]
    return sum(w[:, i] * gate(i, a, b) for i in range(16))


def gumbel_st_grad(
    grad_w: torch.Tensor, z: torch.Tensor, g: torch.Tensor, tau: float
) -> torch.Tensor:
    """The straight-through gradient ``(1/τ)·s ⊙ (∂L/∂w − ⟨∂L/∂w, s⟩)``, ``s = softmax((z+g)/τ)``,
    written as the Jacobian of the softmax applied to ``∂L/∂w``."""
    s = torch.softmax((z + g) / tau, dim=-1)
    jac = (torch.diag_embed(s) - s.unsqueeze(-1) * s.unsqueeze(-2)) / tau
    return (jac @ grad_w.unsqueeze(-1)).squeeze(-1)


DEPENDS_ON_A = frozenset(i for i in range(16) if i not in (0, 15, 5, 10))
DEPENDS_ON_B = frozenset(i for i in range(16) if i not in (0, 15, 3, 12))


def unused_mask(layers: list[tuple[list[int], list[int], list[int]]]) -> list[list[bool]]:
    """Per layer, which neurons are unused, by a plain backward walk over Python lists.

    ``layers[l] = (ids, ia, ib)``. The last layer feeds GroupSum directly, so all of it is used.
    A neuron of layer l < L-1 is used iff some used neuron of layer l+1 reads it through an input
    its gate depends on (``a`` unless the gate is in {0, 15, 5, 10}; ``b`` unless in {0, 15, 3, 12}).
    """
    used = [[False] * len(ids) for ids, _, _ in layers]
    used[-1] = [True] * len(layers[-1][0])
    for depth in range(len(layers) - 1, 0, -1):
        ids, ia, ib = layers[depth]
        for n, gid in enumerate(ids):
            if not used[depth][n]:
                continue
            if gid in DEPENDS_ON_A:
                used[depth - 1][ia[n]] = True
            if gid in DEPENDS_ON_B:
                used[depth - 1][ib[n]] = True
    return [[not u for u in layer] for layer in used]
