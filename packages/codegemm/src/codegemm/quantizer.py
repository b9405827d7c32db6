"""The quantizer: group-norm scales, residual k-means, then alternating (codes, codebooks, scales) refinement.

Objective: the (optionally activation-weighted) weight error ``Σ_{r,i} h_i (W[r,i] − Ŵ[r,i])²``,
with ``h = diag(XᵀX)/N`` from calibration inputs, or ``h = 1`` data-free. Writing
``Ŵ = s·u`` (``u = Σ_k B_k[codes]`` the unscaled reconstruction, ``s`` the group scale), this is
``Σ h s² (W/s − u)²``: a k-means problem on the normalised sub-vectors ``W/s`` with per-element
weights ``Ω = s²·h``, which is why every step below is exact for the W-space error.

1. Scales ``s[r, G] = ‖W[r, G]‖₂`` (the official initialisation), ``W̃ = W / s``.
2. Residual k-means on ``W̃`` (Ω-weighted Lloyd; empty clusters reseeded on the worst points).
3. ``refine_rounds`` rounds of: ICM codes (each codebook's codes re-chosen nearest to the residual
   of the others); a joint least-squares update of all codebooks given the codes (``m·C`` normal
   equations per vector lane, with a tiny ridge towards the old values so unused centroids stay);
   closed-form scales ``s = ⟨w, u⟩_h / ⟨u, u⟩_h``. None of the three raises the weighted error.
4. Codebooks and scales are stored in fp16; reported errors are measured after that cast.
"""

from __future__ import annotations

import dataclasses

import torch

from .config import CodebookConfig
from .reference import dequantize_reference, round_to_nearest_reference

__all__ = ["QuantizeResult", "quantize_weight", "relative_weight_error", "round_to_nearest"]

_CHUNK = 1 << 15  # points per distance chunk: 32K × 256 centroids × 4 B = 32 MiB


@dataclasses.dataclass
class QuantizeResult:
    """The quantized weight and how well it fits.

    Attributes:
        codes: uint8 ``[M, K/v, m]``.
        codebooks: fp16 ``[m, C, v]``.
        scales: fp16 ``[M, K/g]``.
        error: ``‖W − Ŵ‖ / ‖W‖`` after the fp16 cast.
        weighted_error: ``sqrt(Σ h (W − Ŵ)² / Σ h W²)`` after the fp16 cast (= ``error`` data-free).
        history: the weighted relative squared error (fp32 storage, before the cast) after the
            k-means initialisation and after every code, codebook and scale step, in order.
    """

    codes: torch.Tensor
    codebooks: torch.Tensor
    scales: torch.Tensor
    error: float
    weighted_error: float
    history: list[float]


def relative_weight_error(
    weight: torch.Tensor, approx: torch.Tensor, h: torch.Tensor | None = None
) -> float:
    """``sqrt(Σ h (W − Ŵ)² / Σ h W²)`` in float64 (h per input channel ``[K]``; None means 1)."""
    diff = (weight.double() - approx.double()) ** 2
    base = weight.double() ** 2
    if h is not None:
        diff = diff * h.double()
        base = base * h.double()
    return float((diff.sum() / base.sum().clamp_min(1e-300)).sqrt())


def round_to_nearest(weight: torch.Tensor, bits: int = 2, group_size: int = 128) -> torch.Tensor:
    """The baseline: asymmetric min-max RTN per group of inputs (fp16 scale and zero), W -> Ŵ."""
    return round_to_nearest_reference(weight, bits, group_size)


def _nearest(
    points: torch.Tensor, omega: torch.Tensor, centroids: torch.Tensor, uniform_lanes: bool = False
) -> torch.Tensor:
    """argmin_c Σ_d Ω[i,d] (x[i,d] − c[d])² for points/Ω ``[P, v]``, centroids ``[C, v]`` -> ``[P]``.

    ``uniform_lanes``: Ω is constant along d for every point (data-free), so it drops out of the
    argmin and one matmul suffices.
    """
    out = torch.empty(points.shape[0], dtype=torch.int64, device=points.device)
    ct = centroids.t()
    sq = (centroids * centroids).t()
    norms = sq.sum(dim=0, keepdim=True)
    for start in range(0, points.shape[0], _CHUNK):
        x = points[start : start + _CHUNK]
        if uniform_lanes:
            scores = torch.addmm(norms, x, ct, alpha=-2.0)
        else:
            w = omega[start : start + _CHUNK]
            # Σ Ω x² is constant per point; the rest is two small matmuls.
            scores = torch.addmm(w @ sq, w * x, ct, alpha=-2.0)
        out[start : start + _CHUNK] = scores.argmin(dim=1)
    return out


def _point_errors(points, omega, centroids, assign):
    return (omega * (points - centroids[assign]) ** 2).sum(dim=1)


def _kmeans(points, omega, size, iters, generator, uniform_lanes=False):
    """Ω-weighted Lloyd: points/Ω ``[P, v]`` -> (centroids ``[C, v]``, assignment ``[P]``)."""
    count = points.shape[0]
    if count >= size:
        pick = torch.randperm(count, generator=generator)[:size]
    else:
        pick = torch.randint(0, count, (size,), generator=generator)
    centroids = points[pick].clone()
    if count < size:
        centroids += 1e-3 * points.std() * torch.randn(centroids.shape, generator=generator)
    assign = _nearest(points, omega, centroids, uniform_lanes)
    for _ in range(iters):
        num = torch.zeros_like(centroids).index_add_(0, assign, omega * points)
        den = torch.zeros_like(centroids).index_add_(0, assign, omega)
        filled = den > 0
        centroids = torch.where(filled, num / den.clamp_min(1e-30), centroids)
        empty = (~filled).all(dim=1).nonzero().flatten()
        if empty.numel():
            worst = (
                _point_errors(points, omega, centroids, assign)
                .topk(min(empty.numel(), count))
                .indices
            )
            centroids[empty[: worst.numel()]] = points[worst]
        assign = _nearest(points, omega, centroids, uniform_lanes)
    return centroids, assign


def _unscaled(codebooks, codes):
    """Σ_k B_k[codes[..., k]]: codebooks ``[m, C, v]``, codes ``[P, m]`` -> ``[P, v]``."""
    out = codebooks[0][codes[:, 0]]
    for k in range(1, codebooks.shape[0]):
        out = out + codebooks[k][codes[:, k]]
    return out


def _least_squares_codebooks(points, omega, codes, codebooks, ridge=1e-7):
    """All codebooks at once given the codes: per lane d, (G_d + λI) β_d = r_d + λ β_old."""
    m, size, v = codebooks.shape
    width = m * size
    index = codes + torch.arange(m, device=codes.device) * size  # [P, m]
    om = omega.double().t()  # [v, P]
    gram = torch.zeros(v, width * width, dtype=torch.float64)
    rhs = torch.zeros(v, width, dtype=torch.float64)
    target = (omega * points).double().t()
    for a in range(m):
        rhs.index_add_(1, index[:, a], target)
        for b in range(m):
            gram.index_add_(1, index[:, a] * width + index[:, b], om)
    gram = gram.view(v, width, width)
    diag = gram.diagonal(dim1=1, dim2=2)
    lam = ridge * diag.mean(dim=1).clamp_min(1e-30)  # [v]
    old = codebooks.double().permute(2, 0, 1).reshape(v, width)
    eye = torch.eye(width, dtype=torch.float64)
    system = gram + lam.view(v, 1, 1) * eye  # symmetric positive definite thanks to the ridge
    # Cholesky, not LU: MKL's batched LU (torch.linalg.solve) fails at 512×512 with 2 threads here.
    factor, info = torch.linalg.cholesky_ex(system)
    if bool((info != 0).any()):
        return codebooks  # numerically indefinite: keep the old codebooks (the error cannot rise)
    solved = torch.cholesky_solve((rhs + lam.view(v, 1) * old).unsqueeze(-1), factor).squeeze(-1)
    return solved.view(v, m, size).permute(1, 2, 0).to(codebooks.dtype).contiguous()


def quantize_weight(
    weight: torch.Tensor,
    config: CodebookConfig,
    h: torch.Tensor | None = None,
) -> QuantizeResult:
    """Codebook-quantize a weight ``[M, K]`` (optionally weighting input channels by ``h [K]``).

    Args:
        weight: ``[M, K]``, K a multiple of ``config.group_size``.
        config: the format and the iteration counts.
        h: per-input-channel error weights, e.g. ``diag(XᵀX)/N`` of calibration inputs; None = 1.

    Returns:
        A :class:`QuantizeResult`.
    """
    if not isinstance(config, CodebookConfig):
        raise TypeError(f"config: expected a CodebookConfig, got {type(config).__name__}")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError(
            f"weight: expected a 2-D tensor [M, K], got {getattr(weight, 'shape', type(weight))}"
        )
    rows, k = weight.shape
    v, g, m, size = (
        config.vector_size,
        config.group_size,
        config.num_codebooks,
        config.codebook_size,
    )
    if k % g:
        raise ValueError(f"weight: in_features K={k} must be a multiple of group_size={g}")
    if h is not None:
        if h.shape != (k,):
            raise ValueError(f"h: expected shape ({k},), got {tuple(h.shape)}")
        if not bool(torch.isfinite(h).all()) or bool((h < 0).any()):
            raise ValueError("h: expected finite non-negative channel weights")
    generator = torch.Generator().manual_seed(config.seed)
    uniform = h is None
    w = weight.detach().to("cpu", torch.float32)
    hv = torch.ones(k) if h is None else h.detach().to("cpu", torch.float32)
    hv = hv / hv.mean().clamp_min(1e-30)
    groups = k // g
    vectors = k // v
    per_group = g // v
    w_vec = w.view(rows, vectors, v)
    h_vec = hv.view(1, vectors, v)
    w_energy = float((w.double() ** 2 * hv.double()).sum().clamp_min(1e-300))

    scales = w.view(rows, groups, g).norm(dim=-1)
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))

    def normalised():
        s_vec = scales.repeat_interleave(per_group, dim=1).unsqueeze(-1)  # [M, J, 1]
        points = (w_vec / s_vec).reshape(-1, v)
        omega = (s_vec**2 * h_vec).expand(rows, vectors, v).reshape(-1, v)
        return points, omega

    def objective(codebooks, codes):
        u = _unscaled(codebooks, codes).view(rows, vectors, v)
        s_vec = scales.repeat_interleave(per_group, dim=1).unsqueeze(-1)
        diff = (w_vec.double() - s_vec.double() * u.double()) ** 2 * h_vec.double()
        return float(diff.sum()) / w_energy

    points, omega = normalised()
    codebooks = torch.zeros(m, size, v)
    codes = torch.zeros(points.shape[0], m, dtype=torch.int64)
    residual = points.clone()
    for book in range(m):
        centroids, assign = _kmeans(residual, omega, size, config.kmeans_iters, generator, uniform)
        codebooks[book] = centroids
        codes[:, book] = assign
        residual -= centroids[assign]
    history = [objective(codebooks, codes)]

    for _ in range(config.refine_rounds):
        for book in range(m):
            others = _unscaled(codebooks, codes) - codebooks[book][codes[:, book]]
            codes[:, book] = _nearest(points - others, omega, codebooks[book], uniform)
        history.append(objective(codebooks, codes))
        codebooks = _least_squares_codebooks(points, omega, codes, codebooks)
        history.append(objective(codebooks, codes))
        u = _unscaled(codebooks, codes).view(rows, groups, g).double()
        wg = w.view(rows, groups, g).double()
        hg = hv.view(1, groups, g).double()
        num = (hg * wg * u).sum(-1)
        den = (hg * u * u).sum(-1)
        fitted = num / den.clamp_min(1e-300)
        scales = torch.where(
            den > 1e-20 * (hg * wg * wg).sum(-1).clamp_min(1e-300), fitted, scales.double()
        ).float()
        scales = torch.where(scales.abs() > 0, scales, torch.ones_like(scales))
        history.append(objective(codebooks, codes))
        points, omega = normalised()

    codes_out = codes.view(rows, vectors, m).to(torch.uint8)
    books16 = codebooks.to(torch.float16)
    scales16 = scales.to(torch.float16)
    approx = dequantize_reference(codes_out, books16, scales16)
    return QuantizeResult(
        codes=codes_out,
        codebooks=books16,
        scales=scales16,
        error=relative_weight_error(w, approx),
        weighted_error=relative_weight_error(w, approx, hv),
        history=history,
    )
