"""Streaming float64 calibration statistics: means and covariances of (x, y₁) without storing y.

The accumulator keeps, per stream, the count ``n``, the means and the centred second moments
(``M = Σ (v − μ)(w − μ)ᵀ``). Batches merge with Chan et al.'s pairwise update, which is exact
and avoids the cancellation of raw ``Σ x xᵀ − n μ μᵀ`` sums when the residual stream has a large
mean (massive activations). Memory is O((d_in + d_out)²), independent of the number of tokens.
Inputs go straight to float64 (never through fp16).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CovAccumulator", "CovStats", "batch_stats"]


@dataclass(frozen=True)
class CovStats:
    """Unbiased (÷ (N−1)) float64 statistics of inputs ``x`` [d_in] and targets ``y`` [d_out].

    ``target`` says what ``y`` is: ``"attn"`` (the attention output y₁) or ``"residual"``
    (y = x + y₁, derived by :meth:`residual`).
    """

    n: int
    mean_x: torch.Tensor
    mean_y: torch.Tensor
    cxx: torch.Tensor
    cyx: torch.Tensor
    cyy: torch.Tensor
    target: str = "attn"

    @property
    def d_in(self) -> int:
        return self.mean_x.numel()

    @property
    def d_out(self) -> int:
        return self.mean_y.numel()

    def residual(self) -> CovStats:
        """Statistics of (x, y = x + y₁) derived from those of (x, y₁): no second pass, y never stored."""
        if self.target != "attn":
            raise ValueError(
                f"stats: residual() needs target='attn' statistics, got {self.target!r}"
            )
        if self.d_in != self.d_out:
            raise ValueError(
                f"stats: residual target needs d_in == d_out, got {self.d_in} and {self.d_out}"
            )
        cyx = self.cyx + self.cxx
        cyy = self.cyy + self.cyx + self.cyx.T + self.cxx
        return CovStats(
            self.n, self.mean_x, self.mean_y + self.mean_x, self.cxx, cyx, cyy, "residual"
        )


def _as_rows(v: torch.Tensor, d: int, name: str) -> torch.Tensor:
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(v).__name__}")
    if not (v.is_floating_point()):
        raise TypeError(f"{name}: expected a floating tensor, got dtype {v.dtype}")
    if v.ndim < 1 or v.shape[-1] != d:
        raise ValueError(f"{name}: expected shape [..., {d}], got {tuple(v.shape)}")
    return v.reshape(-1, d)


class CovAccumulator:
    """Accumulate float64 moments of ``x`` [N, d_in] and ``y`` [N, d_out] over batches.

    Example:
        >>> import torch
        >>> acc = CovAccumulator(3, 2)
        >>> x = torch.randn(100, 3, dtype=torch.float64)
        >>> y = x[:, :2] * 2 + 1
        >>> acc.update(x[:60], y[:60])
        >>> acc.update(x[60:], y[60:])
        >>> s = acc.finalize()
        >>> bool(torch.allclose(s.cxx, torch.cov(x.T)))
        True
    """

    def __init__(self, d_in: int, d_out: int, device: torch.device | str | None = None):
        for name, d in (("d_in", d_in), ("d_out", d_out)):
            if not isinstance(d, int) or isinstance(d, bool) or d < 1:
                raise ValueError(f"{name}: expected a positive int, got {d!r}")
        self.d_in, self.d_out = d_in, d_out
        kw = dict(dtype=torch.float64, device=device)
        self.n = 0
        self.mean_x = torch.zeros(d_in, **kw)
        self.mean_y = torch.zeros(d_out, **kw)
        self.mxx = torch.zeros(d_in, d_in, **kw)
        self.myx = torch.zeros(d_out, d_in, **kw)
        self.myy = torch.zeros(d_out, d_out, **kw)

    def _merge_moments(self, n, mx, my, mxx, myx, myy) -> None:
        if n == 0:
            return
        na = self.n
        tot = na + n
        dx = mx - self.mean_x
        dy = my - self.mean_y
        f = na * n / tot
        self.mxx += mxx + f * torch.outer(dx, dx)
        self.myx += myx + f * torch.outer(dy, dx)
        self.myy += myy + f * torch.outer(dy, dy)
        self.mean_x += dx * (n / tot)
        self.mean_y += dy * (n / tot)
        self.n = tot

    @torch.no_grad()
    def update(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Add the rows of ``x`` [..., d_in] and ``y`` [..., d_out]; ``mask`` [...] keeps True rows."""
        xr = _as_rows(x, self.d_in, "x")
        yr = _as_rows(y, self.d_out, "y")
        if xr.shape[0] != yr.shape[0]:
            raise ValueError(f"y: expected {xr.shape[0]} rows like x, got {yr.shape[0]}")
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.numel() != xr.shape[0]:
                got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise ValueError(
                    f"mask: expected {xr.shape[0]} entries (x's leading shape), got {got}"
                )
            keep = mask.reshape(-1).to(device=xr.device, dtype=torch.bool)
            xr, yr = xr[keep], yr[keep]
        xr = xr.to(device=self.mean_x.device, dtype=torch.float64)
        yr = yr.to(device=self.mean_x.device, dtype=torch.float64)
        if not bool(torch.isfinite(xr).all()):
            raise ValueError("x: activations contain NaN or Inf")
        if not bool(torch.isfinite(yr).all()):
            raise ValueError("y: activations contain NaN or Inf")
        n = xr.shape[0]
        if n == 0:
            return
        mx, my = xr.mean(0), yr.mean(0)
        xc, yc = xr - mx, yr - my
        self._merge_moments(n, mx, my, xc.T @ xc, yc.T @ xc, yc.T @ yc)

    def merge(self, other: CovAccumulator) -> CovAccumulator:
        """Add another accumulator's tokens into this one (in place); returns self."""
        if not isinstance(other, CovAccumulator):
            raise TypeError(f"other: expected a CovAccumulator, got {type(other).__name__}")
        if (other.d_in, other.d_out) != (self.d_in, self.d_out):
            raise ValueError(
                f"other: expected dims ({self.d_in}, {self.d_out}), got ({other.d_in}, {other.d_out})"
            )
        self._merge_moments(other.n, other.mean_x, other.mean_y, other.mxx, other.myx, other.myy)
        return self

    @torch.no_grad()
    def all_reduce(self, group=None) -> CovAccumulator:
        """Sum the moments over a ``torch.distributed`` group (in place; every rank ends equal).

        Two reductions: the counts and ``n·μ`` give the global means; then each rank's centred
        moments are shifted to the global mean (``M + n (μ_r − μ)(μ_r − μ)ᵀ``) and summed.
        """
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("all_reduce: torch.distributed is not initialised")
        head = torch.cat(
            [
                torch.tensor([float(self.n)], dtype=torch.float64, device=self.mean_x.device),
                self.n * self.mean_x,
                self.n * self.mean_y,
            ]
        )
        dist.all_reduce(head, group=group)
        total = round(float(head[0]))
        if total == 0:
            return self
        gx = head[1 : 1 + self.d_in] / total
        gy = head[1 + self.d_in :] / total
        dx, dy = self.mean_x - gx, self.mean_y - gy
        n = self.n
        parts = [
            self.mxx + n * torch.outer(dx, dx),
            self.myx + n * torch.outer(dy, dx),
            self.myy + n * torch.outer(dy, dy),
        ]
        flat = torch.cat([p.reshape(-1) for p in parts])
        dist.all_reduce(flat, group=group)
        a, b = self.d_in * self.d_in, self.d_out * self.d_in
        self.mxx = flat[:a].reshape(self.d_in, self.d_in).clone()
        self.myx = flat[a : a + b].reshape(self.d_out, self.d_in).clone()
        self.myy = flat[a + b :].reshape(self.d_out, self.d_out).clone()
        self.mean_x, self.mean_y, self.n = gx.clone(), gy.clone(), total
        return self

    def finalize(self) -> CovStats:
        """The unbiased statistics (needs at least two tokens)."""
        if self.n < 2:
            raise ValueError(f"n: need at least 2 accumulated tokens, got {self.n}")
        k = 1.0 / (self.n - 1)
        return CovStats(
            self.n,
            self.mean_x.clone(),
            self.mean_y.clone(),
            self.mxx * k,
            self.myx * k,
            self.myy * k,
            "attn",
        )


def batch_stats(x: torch.Tensor, y: torch.Tensor) -> CovStats:
    """Reference: the same statistics from all rows at once (float64, ``torch.cov`` style)."""
    x = x.reshape(-1, x.shape[-1]).double()
    y = y.reshape(-1, y.shape[-1]).double()
    n = x.shape[0]
    xc, yc = x - x.mean(0), y - y.mean(0)
    k = 1.0 / (n - 1)
    return CovStats(n, x.mean(0), y.mean(0), xc.T @ xc * k, yc.T @ xc * k, yc.T @ yc * k, "attn")
