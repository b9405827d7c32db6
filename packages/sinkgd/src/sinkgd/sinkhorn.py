"""The torch implementation of SR-Sinkhorn: batched, fp32 accumulation, shard-aware.

The output of SR-Sinkhorn is ``diag(r) · G · diag(c)`` for a row scale ``r`` (m) and a column
scale ``c`` (n). Instead of materialising the rescaled matrix twice per iteration (≈6 passes over
``m·n`` values), this path keeps the two scale vectors and the squared gradient ``S = G ⊙ G``:

* the row norms of the current iterate are ``r_i · sqrt((S c²)_i)``,
* the column norms after the row step are ``c_j · sqrt((Sᵀ r²)_j)``,

so one iteration is two matrix–vector products over ``S`` (2 passes), and the result is written
once at the end: ``1 + 2L + 1`` passes for L iterations. The scales are updated exactly as the
reference's normalisations (clamped norms included), so the two agree to rounding.

Zero rows or columns (a parameter that got no gradient, a dead unit) have a zero sum of squares; their
scale is set to zero instead of ``√n / eps`` (which would overflow across iterations), which leaves
the output exactly as the reference's: zero.

For sharded matrices (FSDP2 / DTensor), the caller passes the global shape and reduction callbacks
that all-reduce the row or column sums of squares over the shards of the dimension they sum over.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["accumulation_dtype", "sr_sinkhorn_scales", "sr_sinkhorn_torch"]

Reduce = Callable[[torch.Tensor], torch.Tensor]


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _next_scale(
    scale: torch.Tensor, sum_sq: torch.Tensor, target: float, eps: float
) -> torch.Tensor:
    # The current norm is scale * sqrt(sum_sq); the normalisation multiplies it by
    # target / max(norm, eps). A zero sum (zero row/column) keeps the row/column at zero.
    norm = scale * sum_sq.sqrt()
    new = scale * target / norm.clamp_min(eps)
    return torch.where(sum_sq > 0, new, torch.zeros_like(new))


def sr_sinkhorn_scales(
    grad: torch.Tensor,
    num_iters: int,
    eps: float,
    global_shape: tuple[int, int] | None = None,
    reduce_row_sums: Reduce | None = None,
    reduce_col_sums: Reduce | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The row and column scales of SR-Sinkhorn, ``X = diag(r) G diag(c)``.

    Args:
        grad: ``(..., m, n)`` gradient (any floating dtype; a local shard when distributed).
        num_iters: L ≥ 1.
        eps: lower clamp of the norms.
        global_shape: ``(M, N)`` of the unsharded matrix (defaults to the local shape); the targets
            are √N for rows and √M for columns.
        reduce_row_sums: called on the ``(..., m)`` row sums of squares (a sum over columns) when the
            columns are sharded; must sum over the shards in place and return the tensor.
        reduce_col_sums: the same for the ``(..., n)`` column sums when the rows are sharded.

    Returns:
        ``(g, r, c)``: ``grad`` in the accumulation dtype ``(..., m, n)``, row scales ``(..., m)``
        and column scales ``(..., n)``.
    """
    acc = accumulation_dtype(grad.dtype)
    g = grad.to(acc)
    m, n = grad.shape[-2:]
    big_m, big_n = global_shape if global_shape is not None else (m, n)
    sqrt_n, sqrt_m = math.sqrt(big_n), math.sqrt(big_m)
    sq = g * g
    r = torch.ones(grad.shape[:-1], dtype=acc, device=grad.device)
    c = torch.ones((*grad.shape[:-2], n), dtype=acc, device=grad.device)
    for _ in range(num_iters):
        row_sq = (sq @ (c * c).unsqueeze(-1)).squeeze(-1)  # Σ_j G_ij² c_j²
        if reduce_row_sums is not None:
            row_sq = reduce_row_sums(row_sq)
        r = _next_scale(r, row_sq, sqrt_n, eps)
        col_sq = ((r * r).unsqueeze(-2) @ sq).squeeze(-2)  # Σ_i G_ij² r_i²
        if reduce_col_sums is not None:
            col_sq = reduce_col_sums(col_sq)
        c = _next_scale(c, col_sq, sqrt_m, eps)
    return g, r, c


def sr_sinkhorn_torch(
    grad: torch.Tensor,
    num_iters: int = 5,
    eps: float = 1e-8,
    out_dtype: torch.dtype | None = None,
    global_shape: tuple[int, int] | None = None,
    reduce_row_sums: Reduce | None = None,
    reduce_col_sums: Reduce | None = None,
) -> torch.Tensor:
    """SR-Sinkhorn of a batch of matrices in plain torch (no argument checks; see :func:`sinkgd.sr_sinkhorn`).

    Args:
        grad: ``(..., m, n)`` gradient.
        num_iters: L ≥ 1.
        eps: lower clamp of the norms.
        out_dtype: dtype of the result (default: ``grad.dtype``).
        global_shape, reduce_row_sums, reduce_col_sums: see :func:`sr_sinkhorn_scales`.

    Returns:
        ``(..., m, n)`` normalised gradient.
    """
    g, r, c = sr_sinkhorn_scales(
        grad, num_iters, eps, global_shape, reduce_row_sums, reduce_col_sums
    )
    out = g * r.unsqueeze(-1) * c.unsqueeze(-2)
    return out.to(out_dtype or grad.dtype)
