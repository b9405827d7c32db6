"""Public ops of qcs: the selection math (config, hierarchical Bernoulli policy, estimator, projection).

Notation (spec ``shared/methods/qcs.md`` §2): ``n`` sequences, sequence ``i`` has ``T_i`` response
tokens, padded to ``T = max T_i`` with a boolean ``token_mask [n, T]``.

* ``w_i ~ Bern(s_i)``; tokens are sampled only inside selected sequences: ``v_ij | w_i=1 ~ Bern(t_ij)``
  and ``v_ij = 0`` when ``w_i = 0`` or ``j`` is padding.
* Token weight ``c_ij = w_i·(ε + (1−2ε)·v_ij)`` (:func:`token_weights`).
* Hierarchical REINFORCE (:func:`hierarchical_policy_gradient`) with the leave-one-out baseline::

      g_s    = 1/(K−1) Σ_k (F_k − F̄)·(w^k − s)/(s(1−s))
      g_t,ij = 1/(K−1) Σ_k (F_k − F̄)·w_i^k·(v_ij^k − t_ij)/(t_ij(1−t_ij))

  (``baseline="none"`` uses ``1/K Σ_k F_k·score_k``). Both are unbiased for ``∇Φ(s, t)``.
* Budgets: ``Σ s = m`` and ``Σ_j t_ij = α·T_i``, enforced by :func:`project_capped_simplex`.

Probabilities are clamped to ``[1e-6, 1−1e-6]`` inside log-probabilities and scores (spec §7).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "PROB_CLAMP",
    "HierarchicalBernoulliPolicy",
    "QCSConfig",
    "Selection",
    "bernoulli_scores",
    "hierarchical_policy_gradient",
    "per_token_loss",
    "project_capped_simplex",
    "token_weights",
    "weighted_response_loss",
]

PROB_CLAMP = 1e-6
BASELINES = ("loo", "none")
FINALS = ("topk", "sample")
PROJECTION_METHODS = ("sort", "bisect")


# ----------------------------------------------------------------------------- argument checks
def _check_tensor(x, name: str, ndim: int | None = None, floating: bool = False) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dims, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")


def _check_int(x, name: str, low: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{name}: expected an int, got {type(x).__name__}")
    if x < low:
        raise ValueError(f"{name}: must be >= {low}, got {x}")
    return x


def _check_ratio(token_ratio) -> float:
    if isinstance(token_ratio, bool) or not isinstance(token_ratio, (int, float)):
        raise TypeError(f"token_ratio: expected a float, got {type(token_ratio).__name__}")
    if not (0.0 < token_ratio <= 1.0):
        raise ValueError(f"token_ratio: must lie in (0, 1], got {token_ratio}")
    return float(token_ratio)


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"elastic_eps: expected a float, got {type(eps).__name__}")
    if not (0.0 <= eps <= 0.5):
        raise ValueError(f"elastic_eps: must lie in [0, 0.5], got {eps}")
    return float(eps)


# ----------------------------------------------------------------------------- config
@dataclass(frozen=True, kw_only=True)
class QCSConfig:
    """Hyper-parameters of QCS (spec §3). ``budget`` is the number of sequences ``m`` to keep.

    ``outer_steps`` and ``inner_steps`` default to the spec's 200 outer iterations × 20 rollout steps;
    the selector passes ``steps=inner_steps`` to a ``train_fn`` that takes a ``steps`` keyword.
    ``final="topk"`` keeps the top-m sequences by ``s`` and the top-⌈αT_i⌉ tokens by ``t``;
    ``final="sample"`` draws ``sample_times`` masks from the learned policy, trains and scores each
    like a rollout and keeps the one with the lowest ``F`` (as PBCS does).
    """

    budget: int
    token_ratio: float = 0.5
    elastic_eps: float = 0.1
    rollouts: int = 4
    outer_steps: int = 200
    outer_lr: float = 0.05
    clip_norm: float = 3.0
    baseline: str = "loo"
    inner_steps: int = 20
    final: str = "topk"
    sample_times: int = 10

    def __post_init__(self) -> None:
        _check_int(self.budget, "budget", 1)
        _check_ratio(self.token_ratio)
        _check_eps(self.elastic_eps)
        _check_int(self.rollouts, "rollouts", 1)
        _check_int(self.outer_steps, "outer_steps", 1)
        _check_int(self.inner_steps, "inner_steps", 1)
        _check_int(self.sample_times, "sample_times", 1)
        for name in ("outer_lr", "clip_norm"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise TypeError(f"{name}: expected a float, got {type(val).__name__}")
            if not (val > 0 and math.isfinite(val)):
                raise ValueError(f"{name}: must be a positive finite number, got {val}")
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline: must be one of {BASELINES}, got {self.baseline!r}")
        if self.baseline == "loo" and self.rollouts < 2:
            raise ValueError(
                f"rollouts: the leave-one-out baseline needs rollouts >= 2, got {self.rollouts}"
            )
        if self.final not in FINALS:
            raise ValueError(f"final: must be one of {FINALS}, got {self.final!r}")


# ----------------------------------------------------------------------------- projection
def project_capped_simplex(
    x: torch.Tensor,
    total,
    mask: torch.Tensor | None = None,
    method: str = "sort",
    tol: float = 1e-6,
) -> torch.Tensor:
    """Euclidean projection of each row of ``x`` onto ``{y ∈ [0,1]^N : Σ y = total}``.

    The solution is ``clamp(x − τ, 0, 1)`` with the scalar ``τ`` chosen so the sum is ``total``
    (the KKT conditions). ``method="sort"`` finds ``τ`` exactly from the sorted breakpoints
    ``{x_i − 1, x_i}``; ``method="bisect"`` bisects ``τ`` until the sum is within ``tol``.

    Args:
        x: ``[N]`` or ``[R, N]`` floating tensor.
        total: scalar, or a ``[R]`` tensor of per-row totals, each in ``[0, #valid entries]``.
        mask: optional boolean tensor shaped like ``x``; entries outside the mask are ignored and
            returned as 0.
        method: ``"sort"`` (exact) or ``"bisect"``.
        tol: bisection tolerance on the row sums.

    Returns:
        A new tensor shaped like ``x`` with ``x``'s dtype.
    """
    _check_tensor(x, "x", floating=True)
    if x.dim() not in (1, 2):
        raise ValueError(f"x: expected 1 or 2 dims, got shape {tuple(x.shape)}")
    if method not in PROJECTION_METHODS:
        raise ValueError(f"method: must be one of {PROJECTION_METHODS}, got {method!r}")
    if mask is not None:
        _check_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask: expected a bool tensor, got {mask.dtype}")
        if mask.shape != x.shape:
            raise ValueError(f"mask: shape {tuple(mask.shape)} differs from x {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x: contains NaN or Inf")
    squeeze = x.dim() == 1
    xs = x.detach().to(torch.float64).reshape(-1, x.shape[-1])
    m = (
        torch.ones_like(xs, dtype=torch.bool)
        if mask is None
        else mask.reshape(-1, x.shape[-1]).to(x.device)
    )
    rows, _width = xs.shape
    tot = torch.as_tensor(total, dtype=torch.float64, device=x.device)
    if tot.dim() == 0:
        tot = tot.expand(rows)
    elif tot.shape != (rows,):
        raise ValueError(f"total: expected a scalar or shape ({rows},), got {tuple(tot.shape)}")
    count = m.sum(-1).to(torch.float64)
    if bool(((tot < -1e-9) | (tot > count + 1e-9)).any()) or not bool(torch.isfinite(tot).all()):
        raise ValueError(
            f"total: must lie in [0, number of valid entries] per row; got totals {tot.tolist()[:8]} "
            f"for counts {count.tolist()[:8]}"
        )
    tot = torch.minimum(tot.clamp_min(0.0), count)
    tau = _tau_sort(xs, m, tot, count) if method == "sort" else _tau_bisect(xs, m, tot, tol)
    y = (xs - tau[:, None]).clamp(0.0, 1.0)
    y = torch.where(m, y, torch.zeros_like(y))
    # Totals 0 and count are exact by construction (τ above max / below min − 1).
    y = torch.where((tot == 0)[:, None], torch.zeros_like(y), y)
    y = torch.where((tot == count)[:, None] & m, torch.ones_like(y), y)
    out = y.to(x.dtype).reshape(x.shape)
    return out.reshape(-1) if squeeze else out


def _tau_sort(xs, m, tot, count) -> torch.Tensor:
    _rows, width = xs.shape
    inf = torch.full_like(xs, math.inf)
    lower = torch.where(m, xs - 1.0, inf)  # entering the linear part as τ grows past x − 1
    upper = torch.where(m, xs, inf)  # leaving it (value 0) past x
    b = torch.cat([lower, upper], -1)
    delta = torch.cat(
        [m.to(torch.float64), -m.to(torch.float64)], -1
    )  # change of the number of linear entries
    b, order = torch.sort(b, -1)
    delta = torch.gather(delta, -1, order)
    active = torch.cumsum(delta, -1)  # linear entries just after each breakpoint
    gaps = torch.diff(b, dim=-1)
    gaps = torch.where(torch.isfinite(gaps), gaps, torch.zeros_like(gaps))
    drop = torch.cumsum(active[:, :-1] * gaps, -1)
    g = torch.cat([count[:, None], count[:, None] - drop], -1)  # Σ clamp(x − b_k, 0, 1)
    g = torch.where(torch.isfinite(b), g, torch.zeros_like(g))
    # last breakpoint with g ≥ total (g is non-increasing)
    k = ((g >= tot[:, None]).sum(-1) - 1).clamp(0, 2 * width - 2)
    lo = torch.gather(b, -1, k[:, None])[:, 0]
    hi = torch.gather(b, -1, (k + 1)[:, None])[:, 0]
    hi = torch.where(torch.isfinite(hi), hi, lo)
    # Exact τ on [lo, hi] from the active sets (no accumulated cumsum error).
    sat = m & (xs - 1.0 >= hi[:, None])
    lin = m & (xs - 1.0 <= lo[:, None]) & (xs >= hi[:, None])
    n_lin = lin.sum(-1).to(torch.float64)
    s_lin = torch.where(lin, xs, torch.zeros_like(xs)).sum(-1)
    n_sat = sat.sum(-1).to(torch.float64)
    tau = torch.where(n_lin > 0, (s_lin + n_sat - tot) / n_lin.clamp_min(1.0), lo)
    return torch.minimum(torch.maximum(tau, lo), hi)


def _tau_bisect(xs, m, tot, tol) -> torch.Tensor:
    big = torch.full_like(xs, math.inf)
    lo = torch.where(m, xs, big).amin(-1) - 1.0
    hi = torch.where(m, xs, -big).amax(-1)
    empty = ~m.any(-1)
    lo = torch.where(empty, torch.zeros_like(lo), lo)
    hi = torch.where(empty, torch.zeros_like(hi), hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        s = torch.where(m, (xs - mid[:, None]).clamp(0.0, 1.0), torch.zeros_like(xs)).sum(-1)
        if bool(((s - tot).abs() <= tol).all()):
            return mid
        too_big = s > tot
        lo = torch.where(too_big, mid, lo)
        hi = torch.where(too_big, hi, mid)
    return 0.5 * (lo + hi)


# ----------------------------------------------------------------------------- weights and loss
def token_weights(
    w: torch.Tensor, v: torch.Tensor, eps: float, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Elastic token weights ``c_ij = w_i·(ε + (1−2ε)·v_ij)`` (zero on padding when masked).

    Args:
        w: ``[..., n]`` sequence indicators (or probabilities).
        v: ``[..., n, T]`` token indicators.
        eps: elastic weight ``ε ∈ [0, 0.5]``.
        token_mask: optional ``[n, T]`` bool mask of real tokens.
    """
    _check_tensor(w, "w")
    _check_tensor(v, "v")
    eps = _check_eps(eps)
    if v.shape[:-1] != w.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} must be w's {tuple(w.shape)} plus [T]")
    dtype = v.dtype if v.is_floating_point() else torch.get_default_dtype()
    c = w.to(dtype)[..., None] * (eps + (1.0 - 2.0 * eps) * v.to(dtype))
    if token_mask is not None:
        _check_tensor(token_mask, "token_mask")
        if token_mask.shape != v.shape[-2:]:
            raise ValueError(
                f"token_mask: shape {tuple(token_mask.shape)} differs from v's [n, T] "
                f"{tuple(v.shape[-2:])}"
            )
        c = c * token_mask.to(dtype)
    return c


def per_token_loss(
    logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """``ℓ_ij = −log p(labels_ij)`` per position, 0 where ``labels == ignore_index``.

    ``labels`` are aligned with ``logits`` (already shifted: position ``j`` predicts
    ``labels[:, j]``). Returns ``[B, L]`` float32 (or the logits' dtype if wider).
    """
    _check_tensor(logits, "logits", ndim=3, floating=True)
    _check_tensor(labels, "labels", ndim=2)
    if labels.shape != logits.shape[:2]:
        raise ValueError(
            f"labels: shape {tuple(labels.shape)} differs from logits' [B, L] {tuple(logits.shape[:2])}"
        )
    if labels.is_floating_point():
        raise TypeError(f"labels: expected an integer tensor, got {labels.dtype}")
    wide = torch.promote_types(logits.dtype, torch.float32)
    lf = logits.to(wide)
    loss = F.cross_entropy(
        lf.reshape(-1, lf.shape[-1]),
        labels.reshape(-1),
        ignore_index=ignore_index,
        reduction="none",
    )
    return loss.reshape(labels.shape)


def weighted_response_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    ignore_index: int = -100,
) -> torch.Tensor:
    """``Σ c_ij ℓ_ij / Σ c_ij`` over positions whose label is not ``ignore_index`` (spec §2).

    Instruction tokens carry ``ignore_index`` (context only). A batch whose weights are all zero
    returns a graph-connected 0 (zero gradient).
    """
    _check_tensor(weights, "weights", floating=True)
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels: expected a torch.Tensor, got {type(labels).__name__}")
    if weights.shape != labels.shape:
        raise ValueError(
            f"weights: shape {tuple(weights.shape)} must equal labels' {tuple(labels.shape)}"
        )
    if bool((weights < 0).any()):
        raise ValueError("weights: must be non-negative")
    loss = per_token_loss(logits, labels, ignore_index)
    c = torch.where(labels == ignore_index, torch.zeros_like(weights), weights).to(loss.dtype)
    total = c.sum()
    return (c * loss).sum() / total.clamp_min(torch.finfo(loss.dtype).tiny)


# ----------------------------------------------------------------------------- scores and estimator
def bernoulli_scores(
    w: torch.Tensor, v: torch.Tensor, s: torch.Tensor, t: torch.Tensor, token_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Score functions ``∂ log p(w, v)/∂s`` ``[K, n]`` and ``∂ log p/∂t`` ``[K, n, T]``.

    ``dt`` is exactly 0 for unselected sequences and on padding. ``s`` and ``t`` are clamped to
    ``[PROB_CLAMP, 1 − PROB_CLAMP]``.
    """
    sc = s.clamp(PROB_CLAMP, 1 - PROB_CLAMP)
    tc = t.clamp(PROB_CLAMP, 1 - PROB_CLAMP)
    wf = w.to(s.dtype)
    ds = (wf - sc) / (sc * (1 - sc))
    gate = wf[..., None] * token_mask.to(s.dtype)
    dt = gate * (v.to(t.dtype) - tc) / (tc * (1 - tc))
    dt = torch.where(gate != 0, dt, torch.zeros_like(dt))
    return ds, dt


def _check_samples(w, v, s, t, token_mask) -> None:
    _check_tensor(s, "s", ndim=1, floating=True)
    _check_tensor(t, "t", ndim=2, floating=True)
    _check_tensor(token_mask, "token_mask", ndim=2)
    _check_tensor(w, "w", ndim=2)
    _check_tensor(v, "v", ndim=3)
    n, T = t.shape
    if s.shape != (n,):
        raise ValueError(f"s: shape {tuple(s.shape)} differs from t's [n] = ({n},)")
    if token_mask.shape != (n, T):
        raise ValueError(f"token_mask: shape {tuple(token_mask.shape)} differs from t's {(n, T)}")
    if w.shape[1] != n:
        raise ValueError(f"w: expected shape [K, {n}], got {tuple(w.shape)}")
    if v.shape != (w.shape[0], n, T):
        raise ValueError(f"v: expected shape {(w.shape[0], n, T)}, got {tuple(v.shape)}")


def hierarchical_policy_gradient(
    F_values: torch.Tensor,
    w: torch.Tensor,
    v: torch.Tensor,
    s: torch.Tensor,
    t: torch.Tensor,
    token_mask: torch.Tensor,
    baseline: str = "loo",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hierarchical REINFORCE estimate ``(g_s [n], g_t [n, T])`` of ``∇Φ(s, t)`` from K rollouts.

    Args:
        F_values: ``[K]`` outer losses ``F(θ*(w^k, v^k))``.
        w, v: the K samples, ``[K, n]`` and ``[K, n, T]``.
        s, t, token_mask: the policy (``[n]``, ``[n, T]``, ``[n, T]`` bool).
        baseline: ``"loo"`` (leave-one-out, needs K ≥ 2) or ``"none"``.
    """
    _check_tensor(F_values, "F_values", ndim=1)
    _check_samples(w, v, s, t, token_mask)
    K = F_values.shape[0]
    if w.shape[0] != K:
        raise ValueError(f"w: {w.shape[0]} samples but F_values has {K}")
    if baseline not in BASELINES:
        raise ValueError(f"baseline: must be one of {BASELINES}, got {baseline!r}")
    if not bool(torch.isfinite(F_values).all()):
        raise ValueError("F_values: contains NaN or Inf")
    Fv = F_values.to(s.dtype)
    if baseline == "loo":
        if K < 2:
            raise ValueError(f"F_values: the leave-one-out baseline needs K >= 2 rollouts, got {K}")
        coef = (Fv - Fv.mean()) / (K - 1)
    else:
        if K < 1:
            raise ValueError("F_values: needs at least one rollout")
        coef = Fv / K
    ds, dt = bernoulli_scores(w, v, s, t, token_mask)
    g_s = torch.einsum("k,kn->n", coef, ds)
    g_t = torch.einsum("k,knt->nt", coef, dt)
    return g_s, g_t


# ----------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class Selection:
    """A final coreset: kept sequence indices (sorted; ``[m]`` for ``final="topk"``, the sampled
    count for ``final="sample"``) and a token mask ``[n, T]``."""

    sequence_idx: torch.Tensor
    token_mask: torch.Tensor


class HierarchicalBernoulliPolicy:
    """``w_i ~ Bern(s_i)``, ``v_ij | w_i = 1 ~ Bern(t_ij)`` with budgets ``Σs = m``, ``Σ_j t_ij = αT_i``.

    Args:
        token_lengths: ``[n]`` positive integer response lengths ``T_i``.
        budget: number of sequences ``m``, ``1 ≤ m ≤ n``.
        token_ratio: ``α ∈ (0, 1]``; ``α = 1`` is sequence-only selection (``t ≡ 1``, ``v ≡ 1``).
        dtype: dtype of ``s`` and ``t`` (float64 for references).

    ``s`` starts at ``m/n`` and ``t`` at ``α`` on real tokens (0 on padding).
    """

    def __init__(
        self,
        token_lengths,
        budget: int,
        token_ratio: float = 0.5,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        lengths = (
            torch.as_tensor(token_lengths)
            if not isinstance(token_lengths, torch.Tensor)
            else token_lengths
        )
        if lengths.dim() != 1 or lengths.numel() == 0:
            raise ValueError(
                f"token_lengths: expected a non-empty 1-D sequence, got shape {tuple(lengths.shape)}"
            )
        if lengths.is_floating_point() or lengths.dtype == torch.bool:
            if lengths.is_floating_point() and bool((lengths == lengths.round()).all()):
                lengths = lengths.long()
            else:
                raise TypeError(f"token_lengths: expected integers, got {lengths.dtype}")
        if bool((lengths <= 0).any()):
            bad = int(torch.nonzero(lengths <= 0)[0, 0])
            raise ValueError(
                f"token_lengths: every length must be positive, got {int(lengths[bad])} at index {bad}"
            )
        n = lengths.numel()
        _check_int(budget, "budget", 1)
        if budget > n:
            raise ValueError(f"budget: must be <= n = {n} sequences, got {budget}")
        self.token_ratio = _check_ratio(token_ratio)
        if not dtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating dtype, got {dtype}")
        self.budget = budget
        self.token_lengths = lengths.long()
        T = int(lengths.max())
        self.token_mask = torch.arange(T)[None, :] < self.token_lengths[:, None]
        self.s = torch.full((n,), budget / n, dtype=dtype)
        self.t = self.token_ratio * self.token_mask.to(dtype)

    @property
    def n(self) -> int:
        return self.s.shape[0]

    @property
    def token_budgets(self) -> torch.Tensor:
        """``α·T_i`` per sequence (may be fractional)."""
        return self.token_ratio * self.token_lengths.to(self.s.dtype)

    def sample(self, K: int, generator: torch.Generator | None = None):
        """Draw ``K`` samples ``(w [K, n] bool, v [K, n, T] bool)`` from two uniform blocks.

        The uniforms are drawn in a fixed order (sequence block, then token block unless
        ``token_ratio == 1``) from ``generator``, so the same seed gives the same samples.
        """
        _check_int(K, "K", 1)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator: expected a torch.Generator, got {type(generator).__name__}"
            )
        n, T = self.t.shape
        u_seq = torch.rand(K, n, generator=generator, dtype=torch.float64)
        w = u_seq < self.s.double()
        if self.token_ratio == 1.0:  # sequence-only: v ≡ 1, no token uniforms drawn (as PBCS)
            return w, w[..., None] & self.token_mask
        u_tok = torch.rand(K, n, T, generator=generator, dtype=torch.float64)
        v = (u_tok < self.t.double()) & self.token_mask & w[..., None]
        return w, v

    def log_prob(self, w: torch.Tensor, v: torch.Tensor, s=None, t=None) -> torch.Tensor:
        """``log p(w, v)`` per sample ``[K]`` (the token factor only over selected sequences)."""
        s = self.s if s is None else s
        t = self.t if t is None else t
        _check_samples(w, v, s, t, self.token_mask)
        sc = s.clamp(PROB_CLAMP, 1 - PROB_CLAMP)
        tc = t.clamp(PROB_CLAMP, 1 - PROB_CLAMP)
        wf = w.to(s.dtype)
        vf = v.to(t.dtype)
        lp_seq = (wf * sc.log() + (1 - wf) * (1 - sc).log()).sum(-1)
        tok = vf * tc.log() + (1 - vf) * (1 - tc).log()
        gate = wf[..., None] * self.token_mask.to(t.dtype)
        lp_tok = torch.where(gate != 0, gate * tok, torch.zeros_like(tok)).sum((-2, -1))
        return lp_seq + lp_tok

    def score(self, w: torch.Tensor, v: torch.Tensor):
        """``(ds [K, n], dt [K, n, T])``: gradients of :meth:`log_prob` w.r.t. ``s`` and ``t``."""
        _check_samples(w, v, self.s, self.t, self.token_mask)
        return bernoulli_scores(w, v, self.s, self.t, self.token_mask)

    @torch.no_grad()
    def project_(self) -> HierarchicalBernoulliPolicy:
        """Project in place: ``Σ s = m`` and ``Σ_j t_ij = α T_i``, all in ``[0, 1]``."""
        self.s.copy_(project_capped_simplex(self.s, self.budget))
        self.t.copy_(project_capped_simplex(self.t, self.token_budgets, mask=self.token_mask))
        return self

    def select_topk(self) -> Selection:
        """Final selection: the top-``m`` sequences by ``s`` and in each the top-``⌈αT_i⌉`` tokens by ``t``.

        Ties break towards the lower index (stable sort).
        """
        order = torch.sort(-self.s, stable=True).indices[: self.budget]
        seq_idx = torch.sort(order).values
        keep = torch.ceil(self.token_budgets - 1e-9).long().clamp(1)
        key = torch.where(self.token_mask, self.t, torch.full_like(self.t, -math.inf))
        ranks = torch.argsort(torch.sort(-key, dim=-1, stable=True).indices, dim=-1)
        token_mask = (ranks < keep[:, None]) & self.token_mask
        chosen = torch.zeros(self.n, dtype=torch.bool)
        chosen[seq_idx] = True
        return Selection(sequence_idx=seq_idx, token_mask=token_mask & chosen[:, None])
