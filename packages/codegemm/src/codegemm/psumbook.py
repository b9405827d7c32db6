"""Batched torch implementations used on CPU: dequantize-then-matmul (the baseline) and the Psumbook GEMM.

Psumbook (the method). For a K-tile of ``t`` inputs, the table of every centroid's inner product
with every activation sub-vector, ``P[k, c, j, n] = ⟨x[n, jv:(j+1)v], B_k[c]⟩`` (``m · C · t/v``
rows of N values), is one GEMM: the flattened codebooks ``[m·C, v]`` times the tile's sub-vectors
``[v, t/v · N]`` (rows ordered (k, c, j) so that no transpose follows; a batched matmul in the
(j, k, c) order was 4-10× slower for N <= 4). The codes then pick rows of it:
``F.embedding_bag(mode="sum")`` with one bag per (output row, scale segment) adds the
``m · segment/v`` selected N-vectors, and the per-group scales are applied once per bag. The bag
indices (``(k·C + code)·t/v + j``) depend only on the codes, so a :class:`PsumbookPlan` computes
them once per layer and modules cache it. The default K-tile is
1024 inputs (a 256 KiB table per token for m2v8): on the benchmark CPU one tile over all of K
(1 MiB per token at K = 4096) was 2× slower at N = 16 and no faster at N = 1.

Dequant (the baseline). ``F.embedding_bag`` over the flattened codebooks rebuilds ``Ŵ [M, K]``
(AQLM's ``_dequantize_weight``), the group scales multiply it, then ``F.linear``.

Both accumulate in float32 (float64 when x is float64).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

__all__ = [
    "PsumbookPlan",
    "dequant_matmul",
    "dequantize",
    "make_plan",
    "psumbook_matmul",
    "rebuild_index",
    "resolve_tile",
]


DEFAULT_TILE_K = 1024


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def dequantize(
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Rebuild ``Ŵ [M, K]`` in ``dtype`` from codes ``[M, K/v, m]``, codebooks ``[m, C, v]``, scales ``[M, K/g]``."""
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    k = num_vectors * v
    groups = scales.shape[1]
    flat = codebooks.to(dtype).reshape(m * size, v)
    offsets = torch.arange(m, device=codes.device, dtype=torch.int64) * size
    index = (codes.to(torch.int64) + offsets).reshape(rows * num_vectors, m)
    unscaled = F.embedding_bag(index, flat, mode="sum")  # [M*K/v, v]
    weight = unscaled.view(rows, groups, k // groups) * scales.to(dtype).unsqueeze(-1)
    return weight.view(rows, k)


def rebuild_index(codes: torch.Tensor, codebook_size: int) -> torch.Tensor:
    """Rows of the flattened codebooks ``[m·C, v]`` each code selects: int32 ``[M·K/v, m]``."""
    rows, num_vectors, m = codes.shape
    offsets = torch.arange(m, device=codes.device, dtype=torch.int32) * codebook_size
    return (codes.to(torch.int32) + offsets).reshape(rows * num_vectors, m)


def dequant_matmul(
    x: torch.Tensor,
    codes: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    index: torch.Tensor | None = None,
    row_block: int = 128,
) -> torch.Tensor:
    """The baseline, dequantize then GEMM: x ``[N, K]`` -> ``[N, M]`` in x's compute dtype.

    ``Ŵ`` is rebuilt ``row_block`` rows at a time (so each block is still in cache when
    ``F.linear`` reads it; on this CPU that halves the time of rebuilding all of ``Ŵ`` first) from
    the cached ``index`` (:func:`rebuild_index`; computed here when None).
    """
    dtype = _compute_dtype(x.dtype)
    rows, num_vectors, m = codes.shape
    _, size, v = codebooks.shape
    k = num_vectors * v
    groups = scales.shape[1]
    if index is None:
        index = rebuild_index(codes, size)
    x = x.to(dtype)
    flat = codebooks.to(dtype).reshape(m * size, v)
    scales = scales.to(dtype)
    out = torch.empty(x.shape[0], rows, dtype=dtype, device=x.device)
    for r0 in range(0, rows, row_block):
        r1 = min(r0 + row_block, rows)
        unscaled = F.embedding_bag(index[r0 * num_vectors : r1 * num_vectors], flat, mode="sum")
        weight = unscaled.view(r1 - r0, groups, k // groups) * scales[r0:r1].unsqueeze(-1)
        out[:, r0:r1] = F.linear(x, weight.view(r1 - r0, k))
    return out


def resolve_tile(in_features: int, vector_size: int, group_size: int, tile_k: int | None) -> int:
    """The K-tile actually used: ``tile_k`` rounded so that tiles hold whole groups or divide one.

    ``None`` means one tile over all of K. A tile of at least g inputs is rounded down to a multiple
    of g; a smaller one to the largest multiple of v that divides g.
    """
    if tile_k is None or tile_k >= in_features:
        return in_features
    if tile_k < vector_size:
        raise ValueError(f"tile_k: expected >= vector_size={vector_size}, got {tile_k}")
    if tile_k >= group_size:
        return (tile_k // group_size) * group_size
    per_group = group_size // vector_size
    best = 1
    for d in range(1, per_group + 1):
        if per_group % d == 0 and d * vector_size <= tile_k:
            best = d
    return best * vector_size


@dataclasses.dataclass
class PsumbookPlan:
    """Per-layer gather indices of the torch Psumbook, computed once from the codes.

    Attributes:
        tile: inputs per K-tile (the last tile may be shorter).
        segment: inputs per bag, ``min(g, tile)``; one scale per bag.
        bounds: ``(k0, k1)`` of every tile.
        indices: per tile, int32 ``[M * segments, m * segment / v]``: row ``(k·C + code)·J_t + (j − j0)``
            of the tile's table for each code in the bag.
        groups: per tile, int64 ``[segments]``: the scale group of each segment.
        rebuild: int32 ``[M·K/v, m]`` for the dequant baseline (:func:`rebuild_index`), so both
            paths start from indices cached per layer.
    """

    tile: int
    segment: int
    bounds: list[tuple[int, int]]
    indices: list[torch.Tensor]
    groups: list[torch.Tensor]
    rebuild: torch.Tensor


def make_plan(
    codes: torch.Tensor,
    codebook_size: int,
    vector_size: int,
    group_size: int,
    tile_k: int | None = DEFAULT_TILE_K,
) -> PsumbookPlan:
    """Build the :class:`PsumbookPlan` of codes ``[M, K/v, m]`` (C, v and g given; ``tile_k`` None: one tile)."""
    rows, num_vectors, m = codes.shape
    k = num_vectors * vector_size
    tile = resolve_tile(k, vector_size, group_size, tile_k)
    segment = min(group_size, tile)
    bounds, indices, groups = [], [], []
    device = codes.device
    for k0 in range(0, k, tile):
        k1 = min(k0 + tile, k)
        j0, j1 = k0 // vector_size, k1 // vector_size
        vectors = j1 - j0
        local = torch.arange(vectors, device=device, dtype=torch.int32).view(-1, 1)
        book = torch.arange(m, device=device, dtype=torch.int32) * codebook_size
        index = (codes[:, j0:j1, :].to(torch.int32) + book) * vectors + local  # [M, J_t, m]
        segments = (k1 - k0) // segment
        bounds.append((k0, k1))
        indices.append(index.reshape(rows * segments, -1).contiguous())
        groups.append((k0 + torch.arange(segments, device=device) * segment) // group_size)
    return PsumbookPlan(tile, segment, bounds, indices, groups, rebuild_index(codes, codebook_size))


def psumbook_matmul(
    x: torch.Tensor,
    codebooks: torch.Tensor,
    scales: torch.Tensor,
    plan: PsumbookPlan,
) -> torch.Tensor:
    """The Psumbook GEMM: x ``[N, K]`` -> ``[N, M]`` (x's compute dtype), any N.

    Args:
        x: activations ``[N, K]``.
        codebooks: ``[m, C, v]``.
        scales: ``[M, K/g]``.
        plan: from :func:`make_plan` on the layer's codes.
    """
    dtype = _compute_dtype(x.dtype)
    n = x.shape[0]
    m, size, v = codebooks.shape
    rows = scales.shape[0]
    x = x.to(dtype)
    flat = codebooks.to(dtype).reshape(m * size, v)
    scales = scales.to(dtype)
    out = None
    for (k0, k1), index, groups in zip(plan.bounds, plan.indices, plan.groups):
        vectors = (k1 - k0) // v
        # [v, J_t·N]: column (j, n) is sub-vector j of token n
        x_tile = x[:, k0:k1].reshape(n, vectors, v).permute(2, 1, 0).reshape(v, vectors * n)
        table = (flat @ x_tile).view(m * size * vectors, n)  # rows (k, c, j)
        bags = F.embedding_bag(index, table, mode="sum").view(rows, groups.numel(), n)
        # one multiply per (row, scale group, token), then the sum over the tile's groups
        part = (bags * scales[:, groups].unsqueeze(-1)).sum(dim=1)
        out = part if out is None else out.add_(part)
    return out.t()
