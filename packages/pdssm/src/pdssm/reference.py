"""Naive, readable reference implementations of PD-SSM: the spec in code (float64-capable).

A PD transition is ``A_t = P_t D_t`` with ``P_t`` one-hot in every column and ``D_t`` a complex
diagonal. It is stored as ``(p_t, d_t)``: ``p_t[n]`` is the row holding column ``n``'s nonzero and
``d_t[n]`` the diagonal entry. Two orientations exist (see the README):

* ``"column"`` (the paper, the official JAX code): ``A = P·diag(d)``, column ``n`` has its nonzero
  ``d[n]`` in row ``p[n]``; ``x'[m] = Σ_{n: p[n] = m} d[n]·x[n]``, a scatter-add (``p`` need not be a
  permutation; collisions add, which is what merging FSA states needs).
* ``"row"`` (the official PyTorch code): ``A = diag(d)·P``, row ``m`` has its nonzero ``d[m]`` in
  column ``q[m]``; ``x'[m] = d[m]·x[q[m]]``, a gather.

The recurrence is ``x_t = A_t x_{t-1} + b_t`` for ``t = 1..L``. Everything here is plain torch, so
autograd differentiates it; the tests use it as the oracle for the fast paths.
"""

from __future__ import annotations

import torch

__all__ = [
    "apply_transition",
    "combine",
    "dense_scan",
    "sequential_scan",
    "transition_matrices",
]


def apply_transition(
    p: torch.Tensor, d: torch.Tensor, x: torch.Tensor, orientation: str
) -> torch.Tensor:
    """``A x`` for one PD transition, batched over leading dimensions.

    Args:
        p: int64 (..., N) indices (column: target row of each column; row: source column of each row).
        d: complex (..., N) diagonal.
        x: complex (..., N) state.
        orientation: ``"column"`` or ``"row"``.

    Returns:
        complex (..., N): ``A x``.
    """
    if orientation == "column":
        return torch.zeros_like(x).scatter_add(-1, p, d * x)
    return d * x.gather(-1, p)


def sequential_scan(
    p: torch.Tensor, d: torch.Tensor, b: torch.Tensor, x0: torch.Tensor, orientation: str
) -> torch.Tensor:
    """All states of ``x_t = A_t x_{t-1} + b_t`` by a loop over time (O(L·N) work).

    Args:
        p: int64 (B, L, N) transition indices.
        d: complex (B, L, N) diagonals.
        b: complex (B, L, N) inputs.
        x0: complex (B, N) initial state.
        orientation: ``"column"`` or ``"row"``.

    Returns:
        complex (B, L, N): ``x_1 .. x_L``.
    """
    x = x0
    states = []
    for t in range(d.shape[1]):
        x = apply_transition(p[:, t], d[:, t], x, orientation) + b[:, t]
        states.append(x)
    return torch.stack(states, dim=1)


def transition_matrices(p: torch.Tensor, d: torch.Tensor, orientation: str) -> torch.Tensor:
    """Materialise ``A_t`` as dense (B, L, N, N) matrices (what the official PyTorch code does).

    Args:
        p: int64 (B, L, N) indices, or a real (B, L, N, N) one-hot (or straight-through) matrix.
        d: complex (B, L, N) diagonals.
        orientation: ``"column"`` (``A = P·diag(d)``) or ``"row"`` (``A = diag(d)·P``).

    Returns:
        complex (B, L, N, N) with ``A[..., m, n]`` the coefficient of ``x[n]`` in ``x'[m]``.
    """
    n = d.shape[-1]
    if p.dim() == d.dim():
        # Scatter d straight into place (no int64 one-hot temporary): column A[p[n], n] = d[n],
        # row A[m, q[m]] = d[m]. Differentiable in d.
        a = d.new_zeros(*d.shape, n)
        if orientation == "column":
            return a.scatter(-2, p.unsqueeze(-2), d.unsqueeze(-2))
        return a.scatter(-1, p.unsqueeze(-1), d.unsqueeze(-1))
    matrix = p.to(d.dtype)
    if orientation == "column":
        return matrix * d.unsqueeze(-2)
    return d.unsqueeze(-1) * matrix


def dense_scan(a: torch.Tensor, b: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """All states of ``x_t = A_t x_{t-1} + b_t`` with dense ``A_t`` (O(L·N²) work and memory).

    Args:
        a: complex (B, L, N, N) transition matrices.
        b: complex (B, L, N) inputs.
        x0: complex (B, N) initial state.

    Returns:
        complex (B, L, N): ``x_1 .. x_L``.
    """
    x = x0
    states = []
    # unbind, not a[:, t]: the backward of indexing in a loop zero-fills a full (B, L, N, N)
    # gradient per step (O(L²·N²) work; the official loop does this), unbind's backward stacks once.
    for a_t, b_t in zip(a.unbind(1), b.unbind(1)):
        x = torch.einsum("bmn,bn->bm", a_t, x) + b_t
        states.append(x)
    return torch.stack(states, dim=1)


def combine(
    earlier: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    later: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    orientation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The associative combine of two affine PD maps ``x ↦ A x + b``: first ``earlier``, then ``later``.

    Column: ``p = p_j[p_i]``, ``d = d_j[p_i]·d_i``, ``b = scatter_add(p_j, d_j·b_i) + b_j``.
    Row: ``q = q_i[q_j]``, ``d = d_j·d_i[q_j]``, ``b = d_j·b_i[q_j] + b_j``. O(N) per element.

    Args:
        earlier: ``(p_i, d_i, b_i)``, each (..., N).
        later: ``(p_j, d_j, b_j)``, each (..., N).
        orientation: ``"column"`` or ``"row"``.

    Returns:
        ``(p, d, b)`` of the composed map, each (..., N).
    """
    p_i, d_i, b_i = earlier
    p_j, d_j, b_j = later
    if orientation == "column":
        p = p_j.gather(-1, p_i)
        d = d_j.gather(-1, p_i) * d_i
        b = b_j.scatter_add(-1, p_j, d_j * b_i)
    else:
        p = p_i.gather(-1, p_j)
        d = d_j * d_i.gather(-1, p_j)
        b = d_j * b_i.gather(-1, p_j) + b_j
    return p, d, b
