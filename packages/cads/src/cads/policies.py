"""Selection policies p_s and the Hessian-free policy-gradient estimator (spec section 2).

* ``BernoulliPolicy`` (CADS-E): m_i ~ Bern(s_i), score (m - s) / (s (1 - s)).
* ``TruncatedGaussianPolicy`` (CADS-S, *[design]*): w_g ~ TN(mu_g, sigma^2, [0, 1]).
* ``policy_gradient``: g = 1/(K-1) sum_k (V_k - mean V) score_k, the leave-one-out baseline
  (equal to 1/K sum_k (V_k - mean_{j!=k} V_j) score_k, hence unbiased).

Every policy keeps its parameter in float64; random numbers come only from the ``generator``
passed in (global RNGs are never touched).
"""

from __future__ import annotations

import math

import torch
from torch.special import log_ndtr, ndtr, ndtri

from ._checks import check_float, check_generator, check_int, check_tensor

__all__ = ["BernoulliPolicy", "TruncatedGaussianPolicy", "policy_gradient"]

_EPS = 1e-6
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class BernoulliPolicy:
    """Independent Bernoulli selection of ``n`` examples with probabilities ``s`` (float64).

    With ``subset_size`` the projection is onto the capped simplex {0 <= s <= 1, sum s = size}
    (s <- clamp(s - tau, 0, 1) with tau found by bisection, as in PBCS); otherwise onto the box.

    >>> p = BernoulliPolicy(5, subset_size=2)
    >>> round(p.s.sum().item(), 6)
    2.0
    """

    def __init__(self, n: int, init: float = 0.5, subset_size: int | None = None) -> None:
        n = check_int("n", n, low=1)
        init = check_float("init", init)
        if not 0.0 <= init <= 1.0:
            raise ValueError(f"init must lie in [0, 1], got {init}")
        if subset_size is not None:
            subset_size = check_int("subset_size", subset_size, low=1)
            if subset_size > n:
                raise ValueError(f"subset_size must be <= n = {n}, got {subset_size}")
        self.n = n
        self.subset_size = subset_size
        self.s = torch.full((n,), init, dtype=torch.float64)
        self.project_()

    def _check_masks(self, masks: object) -> torch.Tensor:
        if not isinstance(masks, torch.Tensor):
            raise TypeError(f"samples must be a torch.Tensor, got {type(masks).__name__}")
        if masks.ndim != 2 or masks.shape[1] != self.n:
            raise ValueError(f"samples must have shape [K, {self.n}], got {tuple(masks.shape)}")
        m = masks.to(torch.float64)
        if not ((m == 0) | (m == 1)).all():
            raise ValueError("samples must be 0/1 masks")
        return m

    def sample(self, K: int, generator: torch.Generator, allow_empty: bool = False) -> torch.Tensor:
        """K masks [K, n] (bool). Empty masks are redrawn unless ``allow_empty`` (the exact
        distribution p_s, which the unbiasedness tests need)."""
        K = check_int("K", K, low=1)
        check_generator(generator)
        if not allow_empty and self.s.max().item() <= 0.0:
            raise ValueError("every s_i is 0: no non-empty mask can be drawn")
        out = torch.rand(K, self.n, generator=generator, dtype=torch.float64) < self.s
        if not allow_empty:
            empty = ~out.any(dim=1)
            while empty.any():
                redraw = (
                    torch.rand(int(empty.sum()), self.n, generator=generator, dtype=torch.float64)
                    < self.s
                )
                out[empty] = redraw
                empty = ~out.any(dim=1)
        return out

    def _s_clamped(self) -> torch.Tensor:
        return self.s.clamp(_EPS, 1 - _EPS)

    def log_prob(self, samples: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        """log p_s(m) per mask [K] (``s`` overrides the parameter, e.g. a leaf for autograd)."""
        m = self._check_masks(samples)
        s = self._s_clamped() if s is None else s.clamp(_EPS, 1 - _EPS)
        return (m * torch.log(s) + (1 - m) * torch.log1p(-s)).sum(dim=1)

    def score(self, samples: torch.Tensor) -> torch.Tensor:
        """d log p_s(m) / ds = (m - s) / (s (1 - s)), shape [K, n]."""
        m = self._check_masks(samples)
        s = self._s_clamped()
        return (m - s) / (s * (1 - s))

    @torch.no_grad()
    def project_(self) -> BernoulliPolicy:
        """Project s in place onto the box, or onto the capped simplex when ``subset_size`` is set."""
        if self.subset_size is None:
            self.s.clamp_(0.0, 1.0)
            return self
        k = float(self.subset_size)
        lo, hi = (
            (self.s.min() - 1.0).item(),
            self.s.max().item(),
        )  # sum(lo) = n >= k, sum(hi) = 0 <= k
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if (self.s - mid).clamp(0.0, 1.0).sum().item() > k:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-15:
                break
        self.s.copy_((self.s - 0.5 * (lo + hi)).clamp(0.0, 1.0))
        return self


class TruncatedGaussianPolicy:
    """Source weights w_g ~ TN(mu_g, sigma^2, [0, 1]) for ``S`` sources (CADS-S, *[design]*).

    log Z = log(Phi(beta) - Phi(alpha)), alpha = -mu/sigma, beta = (1-mu)/sigma, is computed from
    ``log_ndtr`` differences in the tail that keeps it finite for mu near 0 and 1.

    >>> p = TruncatedGaussianPolicy(3)
    >>> w = p.sample(4, torch.Generator().manual_seed(0))
    >>> tuple(w.shape), bool(((w >= 0) & (w <= 1)).all())
    ((4, 3), True)
    """

    def __init__(self, S: int, sigma: float = 0.1, init: float = 0.5) -> None:
        S = check_int("S", S, low=1)
        sigma = check_float("sigma", sigma)
        if not (sigma > 0 and math.isfinite(sigma)):
            raise ValueError(f"sigma must be > 0 and finite, got {sigma}")
        init = check_float("init", init)
        if not 0.0 <= init <= 1.0:
            raise ValueError(f"init must lie in [0, 1], got {init}")
        self.S = S
        self.sigma = sigma
        self.mu = torch.full((S,), init, dtype=torch.float64)

    def _bounds(self, mu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return -mu / self.sigma, (1 - mu) / self.sigma

    def log_Z(self, mu: torch.Tensor | None = None) -> torch.Tensor:
        """log(Phi(beta) - Phi(alpha)) per source, stable in both tails."""
        mu = self.mu if mu is None else mu
        a, b = self._bounds(mu)
        # Upper tail (alpha > 0): Phi(beta) - Phi(alpha) = Phi(-alpha) - Phi(-beta).
        upper = a > 0
        hi = torch.where(upper, -a, b)
        lo = torch.where(upper, -b, a)
        lhi, llo = log_ndtr(hi), log_ndtr(lo)
        return lhi + torch.log1p(-torch.exp(llo - lhi))

    def _check_w(self, samples: object) -> torch.Tensor:
        w = check_tensor("samples", samples, ndim=2)
        if w.shape[1] != self.S:
            raise ValueError(f"samples must have shape [K, {self.S}], got {tuple(w.shape)}")
        if ((w < 0) | (w > 1)).any():
            raise ValueError("samples must lie in [0, 1]")
        return w.to(torch.float64)

    def sample(self, K: int, generator: torch.Generator) -> torch.Tensor:
        """K weight vectors [K, S] by the inverse CDF (float64)."""
        K = check_int("K", K, low=1)
        check_generator(generator)
        a, b = self._bounds(self.mu)
        u = torch.rand(K, self.S, generator=generator, dtype=torch.float64)
        pa, pb = ndtr(a), ndtr(b)
        w = self.mu + self.sigma * ndtri(pa + u * (pb - pa))
        return w.clamp(0.0, 1.0)

    def log_prob(self, samples: torch.Tensor, mu: torch.Tensor | None = None) -> torch.Tensor:
        """log p_mu(w), summed over sources, per sample [K]."""
        w = self._check_w(samples)
        mu = self.mu if mu is None else mu
        z = (w - mu) / self.sigma
        return (-0.5 * z * z - _LOG_SQRT_2PI - math.log(self.sigma) - self.log_Z(mu)).sum(dim=1)

    def score(self, samples: torch.Tensor) -> torch.Tensor:
        """d log p / d mu = (w - mu)/sigma^2 + [phi(beta) - phi(alpha)] / (sigma Z), shape [K, S]."""
        w = self._check_w(samples)
        a, b = self._bounds(self.mu)
        log_z = self.log_Z()
        phi_ratio = torch.exp(-0.5 * b * b - _LOG_SQRT_2PI - log_z) - torch.exp(
            -0.5 * a * a - _LOG_SQRT_2PI - log_z
        )
        return (w - self.mu) / self.sigma**2 + phi_ratio / self.sigma

    @torch.no_grad()
    def project_(self) -> TruncatedGaussianPolicy:
        """Clamp mu to [0, 1] in place."""
        self.mu.clamp_(0.0, 1.0)
        return self


def policy_gradient(
    values: torch.Tensor, scores: torch.Tensor, baseline: str = "loo"
) -> torch.Tensor:
    """Hessian-free estimate of d/ds E_{m~p_s}[V(m)] from K rollouts.

    ``values`` [K] (F_k for BudgetedPBCS, the penalty P_k for CADS), ``scores`` [K, ...]
    (d log p_s(m_k)/ds). ``baseline="loo"``: 1/(K-1) sum_k (V_k - mean V) score_k (K >= 2);
    ``"none"``: 1/K sum_k V_k score_k. Both are unbiased.

    >>> policy_gradient(torch.tensor([1.0, 3.0]), torch.tensor([[1.0], [-1.0]]))
    tensor([-2.])
    """
    v = check_tensor("values", values, ndim=1)
    sc = check_tensor("scores", scores)
    if sc.ndim < 1 or sc.shape[0] != v.shape[0]:
        raise ValueError(
            f"scores must have shape [K, ...] with K = {v.shape[0]}, got {tuple(sc.shape)}"
        )
    K = v.shape[0]
    if baseline == "loo":
        if K < 2:
            raise ValueError(f"baseline='loo' needs at least 2 rollouts (values has K = {K})")
        centred = v - v.mean()
        return torch.einsum("k,k...->...", centred.to(sc.dtype), sc) / (K - 1)
    if baseline == "none":
        if K < 1:
            raise ValueError("values must hold at least one rollout")
        return torch.einsum("k,k...->...", v.to(sc.dtype), sc) / K
    raise ValueError(f"baseline must be 'loo' or 'none', got {baseline!r}")
