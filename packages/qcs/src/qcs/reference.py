"""Float64 references for QCS: a closed-form weighted-ridge inner problem, exact Φ by enumeration.

The toy problem (spec §3 ``reference.py``): sequence ``i`` has ``T_i`` "token" rows
``(x_ij ∈ R^d, y_ij)``. With token weights ``c_ij``, the inner problem is weighted ridge regression

    θ*(c) = argmin_θ  Σ_ij c_ij (x_ijᵀθ − y_ij)² / Σ_ij c_ij + λ‖θ‖²

(the data term is 0 when ``Σc = 0``, so ``θ* = 0``), and the outer objective is the validation
mean squared error ``F(θ) = mean_k (x_kᵀθ − y_k)²``.

* :func:`expected_objective_exact` enumerates every ``(w, v)`` with ``v = 0`` outside selected
  sequences: ``Π_i (1 + 2^{T_i})`` masks, each weighted by its probability (a polynomial in ``s, t``).
* :func:`exact_gradient` is the gradient of that polynomial (autograd of an exact sum).
* :func:`exact_estimator_mean` is the exact expectation of the REINFORCE estimator with
  ``baseline="none"``: ``Σ p(w,v)·F(w,v)·score(w,v)``.
* :func:`implicit_hypergradient` is the deterministic hypergradient ``dF(θ*(c))/dc`` by an explicit
  Hessian solve.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from .ops import bernoulli_scores, token_weights

__all__ = [
    "RidgeProblem",
    "enumerate_masks",
    "exact_estimator_mean",
    "exact_gradient",
    "expected_objective_exact",
    "implicit_hypergradient",
    "inner_solution",
    "make_ridge_problem",
    "mask_probabilities",
    "objective",
    "outer_loss",
    "pbcs_sequence_reference",
]


@dataclass(frozen=True)
class RidgeProblem:
    """Token rows ``X [n, T, d]``, targets ``y [n, T]``, ``token_mask [n, T]``, validation set, λ."""

    X: torch.Tensor
    y: torch.Tensor
    token_mask: torch.Tensor
    X_val: torch.Tensor
    y_val: torch.Tensor
    lam: float = 0.1


def make_ridge_problem(token_lengths, d: int = 3, n_val: int = 8, lam: float = 0.1, seed: int = 0):
    """A random float64 toy problem; sequences get different true parameters so selection matters."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.as_tensor(token_lengths, dtype=torch.long)
    n, T = lengths.numel(), int(lengths.max())
    mask = torch.arange(T)[None, :] < lengths[:, None]
    X = torch.randn(n, T, d, generator=g, dtype=torch.float64)
    theta_seq = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.einsum("ntd,nd->nt", X, theta_seq) + 0.3 * torch.randn(
        n, T, generator=g, dtype=torch.float64
    )
    X = X * mask[..., None]
    y = y * mask
    X_val = torch.randn(n_val, d, generator=g, dtype=torch.float64)
    y_val = X_val @ theta_seq[0] + 0.1 * torch.randn(n_val, generator=g, dtype=torch.float64)
    return RidgeProblem(X, y, mask, X_val, y_val, lam)


def inner_solution(problem: RidgeProblem, c: torch.Tensor) -> torch.Tensor:
    """``θ*(c)`` for weights ``c [..., n, T]`` (batched), shape ``[..., d]``."""
    c = c * problem.token_mask.to(c.dtype)
    total = c.sum((-2, -1))
    scale = torch.where(total > 0, 1.0 / total.clamp_min(1e-300), torch.zeros_like(total))
    d = problem.X.shape[-1]
    A = torch.einsum("...nt,ntd,nte->...de", c, problem.X, problem.X) * scale[..., None, None]
    A = A + problem.lam * torch.eye(d, dtype=c.dtype)
    b = torch.einsum("...nt,ntd,nt->...d", c, problem.X, problem.y) * scale[..., None]
    return torch.linalg.solve(A, b.unsqueeze(-1)).squeeze(-1)


def outer_loss(problem: RidgeProblem, theta: torch.Tensor) -> torch.Tensor:
    """Validation MSE ``F(θ)`` for ``θ [..., d]``."""
    r = torch.einsum("kd,...d->...k", problem.X_val, theta) - problem.y_val
    return (r * r).mean(-1)


def objective(problem: RidgeProblem, c: torch.Tensor) -> torch.Tensor:
    """``F(θ*(c))``."""
    return outer_loss(problem, inner_solution(problem, c))


def enumerate_masks(token_mask: torch.Tensor):
    """All ``(w [M, n], v [M, n, T])`` with ``v = 0`` outside selected sequences and on padding."""
    _n, T = token_mask.shape
    lengths = token_mask.sum(-1).tolist()
    per_seq = []
    for T_i in lengths:
        opts = [(0, (0,) * T_i)] + [(1, bits) for bits in itertools.product((0, 1), repeat=T_i)]
        per_seq.append(opts)
    ws, vs = [], []
    for combo in itertools.product(*per_seq):
        ws.append([c[0] for c in combo])
        vs.append([list(c[1]) + [0] * (T - len(c[1])) for c in combo])
    return torch.tensor(ws, dtype=torch.bool), torch.tensor(vs, dtype=torch.bool)


def mask_probabilities(w, v, s, t, token_mask) -> torch.Tensor:
    """``p(w, v)`` per mask, computed as products (exact at vertices, no log/clamp)."""
    p_seq = torch.where(w, s, 1 - s).prod(-1)
    tok = torch.where(v, t, 1 - t)
    gate = w[..., None] & token_mask
    p_tok = torch.where(gate, tok, torch.ones_like(tok)).prod(-1).prod(-1)
    return p_seq * p_tok


def expected_objective_exact(problem, s, t, eps: float = 0.1) -> torch.Tensor:
    """``Φ(s, t) = E[F(θ*(c(w, v)))]`` by enumerating every mask (differentiable in ``s, t``)."""
    w, v = enumerate_masks(problem.token_mask)
    Fv = objective(problem, token_weights(w, v, eps, problem.token_mask).to(s.dtype))
    return (mask_probabilities(w, v, s, t, problem.token_mask) * Fv).sum()


def exact_gradient(problem, s, t, eps: float = 0.1):
    """``(∇_s Φ [n], ∇_t Φ [n, T])``; zero on padding."""
    s = s.detach().clone().requires_grad_(True)
    t = t.detach().clone().requires_grad_(True)
    phi = expected_objective_exact(problem, s, t, eps)
    gs, gt = torch.autograd.grad(phi, (s, t))
    return gs, gt * problem.token_mask.to(gt.dtype)


def exact_estimator_mean(problem, s, t, eps: float = 0.1):
    """Exact ``E[F·score]`` over all masks (the ``baseline="none"`` estimator's expectation)."""
    w, v = enumerate_masks(problem.token_mask)
    Fv = objective(problem, token_weights(w, v, eps, problem.token_mask).to(s.dtype))
    p = mask_probabilities(w, v, s, t, problem.token_mask)
    ds, dt = bernoulli_scores(w, v, s, t, problem.token_mask)
    return torch.einsum("m,mn->n", p * Fv, ds), torch.einsum("m,mnt->nt", p * Fv, dt)


def implicit_hypergradient(problem: RidgeProblem, c: torch.Tensor) -> torch.Tensor:
    """``dF(θ*(c))/dc [n, T]`` by the implicit function theorem with an explicit Hessian solve.

    With ``S = Σc``, ``r = Xθ − y`` and inner gradient ``G = (2/S) Σ c x r + 2λθ``:
    ``H = ∂G/∂θ = (2/S) Σ c x xᵀ + 2λI``, ``∂G/∂c_ij = (2/S)(x_ij r_ij − Σ c x r / S)`` and
    ``dF/dc_ij = −∇F(θ*)ᵀ H⁻¹ ∂G/∂c_ij``. Requires ``Σc > 0``.
    """
    c = (c * problem.token_mask.to(c.dtype)).to(torch.float64)
    S = c.sum()
    if not S > 0:
        raise ValueError("c: the hypergradient needs a positive total weight")
    theta = inner_solution(problem, c)
    X, y = problem.X, problem.y
    r = torch.einsum("ntd,d->nt", X, theta) - y
    d = X.shape[-1]
    H = (2 / S) * torch.einsum("nt,ntd,nte->de", c, X, X) + 2 * problem.lam * torch.eye(
        d, dtype=torch.float64
    )
    mean_xr = torch.einsum("nt,ntd,nt->d", c, X, r) / S
    dG = (2 / S) * (X * r[..., None] - mean_xr)  # [n, T, d]
    rv = problem.X_val @ theta - problem.y_val
    gradF = 2 * problem.X_val.T @ rv / rv.numel()
    u = torch.linalg.solve(H, gradF)
    return -torch.einsum("ntd,d->nt", dG, u) * problem.token_mask.to(torch.float64)


def pbcs_sequence_reference(
    train_eval, token_mask, budget, rollouts, steps, lr, clip_norm, eps, seed
) -> torch.Tensor:
    """Plain sequence-level PBCS loop (float64): REINFORCE with the leave-one-out baseline, global
    norm clipping, hand-written Adam with cosine-decayed learning rate, bisection projection.

    ``train_eval(c [n, T]) -> float`` is one rollout. Returns the trajectory of ``s``, ``[steps, n]``.
    Mask draws use ``torch.rand(K, n, generator)`` exactly as :class:`~qcs.HierarchicalBernoulliPolicy`
    does for ``token_ratio = 1``; rollouts run under the same per-step torch seed.
    """
    import math

    from .ops import project_capped_simplex

    n = token_mask.shape[0]
    s = torch.full((n,), budget / n, dtype=torch.float64)
    m1 = torch.zeros_like(s)
    m2 = torch.zeros_like(s)
    gen = torch.Generator().manual_seed(seed)
    traj = []
    for step in range(steps):
        w = torch.rand(rollouts, n, generator=gen, dtype=torch.float64) < s
        Fv = []
        for k in range(rollouts):
            c = w[k, :, None].double() * (1 - eps) * token_mask.double()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed * 1_000_003 + step)
                Fv.append(float(train_eval(c)))
        Fv = torch.tensor(Fv, dtype=torch.float64)
        sc = s.clamp(1e-6, 1 - 1e-6)
        g = ((Fv - Fv.mean())[:, None] * (w.double() - sc) / (sc * (1 - sc))).sum(0) / (
            rollouts - 1
        )
        norm = float(g.norm())
        g = g * min(1.0, clip_norm / (norm + 1e-6))
        b1, b2, adam_eps = 0.9, 0.999, 1e-8
        m1 = b1 * m1 + (1 - b1) * g
        m2 = b2 * m2 + (1 - b2) * g * g
        lr_t = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        mhat = m1 / (1 - b1 ** (step + 1))
        vhat = m2 / (1 - b2 ** (step + 1))
        s = s - lr_t * mhat / (vhat.sqrt() + adam_eps)
        s = project_capped_simplex(s, budget, method="bisect", tol=1e-10)
        traj.append(s.clone())
    return torch.stack(traj)
