"""Fig. 6's toy: how far one Adam step moves a residual branch from its linearization, vs depth.

A read-in (N(0,1)/√D), ``depth`` residual branches x ← x + m_L^-α·W₂·relu(W₁·relu(x)) with
N(0, 2/N) weights, m_L = depth/2, and a read-out (N(0,1)/N) on scikit-learn's digits. One Adam step
(lr = lr_base·N^-½·m_L^(α−1), ε = eps_base·m_L^-α); the metric is |h₁ − h_lin| / |h_lin| for
sample 0, unit 0 of one branch's output. Three readings (``step``):

- ``"both"``: branch 1's W₁ and W₂ step, h_lin = h₀ + ⟨ΔW, ∂h/∂W⟩ (the exact first-order term).
  The remainder is the bilinear term ΔW₂·relu'·ΔW₁ ∝ lr², so the metric goes as m_L^(2α−2).
- ``"first"``: W₁ alone, exact first-order term. With ReLU the branch is piecewise linear in W₁,
  so this is exactly linear up to rare kink crossings (≈1e-16).
- ``"notebook"``: what the official notebook (EleutherAI/nanoGPT-mup, branch ``completep``,
  ``completep_examples/relative_distance_from_linearization.ipynb``) computes: W₁ of the second
  branch alone, unit-variance weights multiplied by √(2/N) in the forward (so Adam steps in those
  units), frozen elsewhere, and as "first-order term" its ``get_first_order_taylor``, which sums
  ``delta_w[0, :] * grad`` — by broadcasting Σᵢⱼ ΔW₀ⱼ·∂h/∂Wᵢⱼ, not ⟨ΔW, ∂h/∂W⟩. The remainder is
  then first order in the step, ∝ lr ∝ m_L^(α−1): slope −½ for α = ½ and 0 for α = 1, which is
  the figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["linearization_distance"]


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float64) / 16.0
    return x, torch.tensor(data.target, dtype=torch.long)


def linearization_distance(
    alpha: float,
    depths: Sequence[int],
    seeds: Sequence[int],
    width: int = 256,
    batch: int = 128,
    lr_base: float = 1e-4,
    eps_base: float = 1e-8,
    step: str = "both",
) -> dict[int, list[float]]:
    """Relative distance from linearization after one Adam step, per depth and seed (float64).

    Args:
        alpha: the depth exponent (0.5 depth-μP, 1 CompleteP), in [0, 1].
        depths: numbers of residual branches (≥ 1).
        seeds: one toy network and batch per seed.
        width: N.
        batch: examples in the step.
        lr_base, eps_base: Adam's base lr and ε.
        step: ``"both"`` steps W₁ and W₂ of branch 1; ``"first"`` steps W₁ only (exactly linear
            for ReLU up to kink crossings); ``"notebook"`` reproduces the official notebook's
            measurement (see the module docstring).

    Returns:
        ``{depth: [distance per seed]}``.

    >>> d = linearization_distance(1.0, [2], [0], width=16, batch=8)
    >>> 0 < d[2][0] < 1
    True
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha: expected a number in [0, 1], got {alpha!r}")
    if not depths or any(not isinstance(d, int) or d < 1 for d in depths):
        raise ValueError(f"depths: expected ints >= 1, got {list(depths)!r}")
    if step not in ("both", "first", "notebook"):
        raise ValueError(f"step: expected 'both', 'first' or 'notebook', got {step!r}")
    x_all, y_all = _digits()
    features = x_all.shape[1]
    out: dict[int, list[float]] = {d: [] for d in depths}
    for depth in depths:
        m_l = depth / 2
        scale = m_l**-alpha
        lr = lr_base * width**-0.5 * m_l ** (alpha - 1)
        eps = eps_base * m_l**-alpha
        for seed in seeds:
            gen = torch.Generator().manual_seed(seed)
            idx = torch.randperm(x_all.shape[0], generator=gen)[:batch]
            x, y = x_all[idx], y_all[idx]

            def normal(*shape, std, gen=gen):
                return torch.randn(*shape, generator=gen, dtype=torch.float64) * std

            w_in = normal(width, features, std=1.0 / math.sqrt(features))
            branches = [
                (
                    normal(width, width, std=math.sqrt(2 / width)),
                    normal(width, width, std=math.sqrt(2 / width)),
                )
                for _ in range(depth)
            ]
            w_out = normal(10, width, std=1.0 / width)
            h_in = x @ w_in.T

            def branch1(w1, w2, h_in=h_in, scale=scale):
                return scale * torch.relu(torch.relu(h_in) @ w1.T) @ w2.T

            if step == "notebook":
                out[depth].append(_notebook_distance(h_in, branches, w_out, y, scale, lr, eps))
                continue
            w1 = branches[0][0].clone().requires_grad_(True)
            w2 = branches[0][1].clone().requires_grad_(True)
            with torch.enable_grad():
                h = h_in + branch1(w1, w2)
                for wa, wb in branches[1:]:
                    h = h + scale * torch.relu(torch.relu(h) @ wa.T) @ wb.T
                loss = torch.nn.functional.cross_entropy(h @ w_out.T, y)
                grads = torch.autograd.grad(loss, (w1, w2))
            w0 = (branches[0][0], branches[0][1])
            # Adam's first step: m̂ = g, v̂ = g², so Δ = -lr·g/(|g| + ε)
            delta = tuple(-lr * g / (g.abs() + eps) for g in grads)
            if step == "first":
                delta = (delta[0], torch.zeros_like(delta[1]))
            h0, tangent = torch.func.jvp(branch1, w0, delta)
            h_lin = (h0 + tangent)[0, 0]
            h1 = branch1(*(w + d for w, d in zip(w0, delta, strict=True)))[0, 0]
            out[depth].append(float((h1 - h_lin).abs() / h_lin.abs()))
    return out


def _notebook_distance(h_in, branches, w_out, y, scale, lr, eps) -> float:
    """The official notebook's measurement on this network (see the module docstring).

    Its weights are N(0, 1) with the √(2/N) factor in the forward; ours are N(0, 2/N), so its
    unit-variance weight is ours·√(N/2) and Adam steps it by lr per entry. It takes the second
    branch (or the only one at depth 1), trains that branch's first weight alone and hooks the
    branch's output before the residual multiplier.
    """
    width = h_in.shape[1]
    mult = math.sqrt(2 / width)
    k = min(1, len(branches) - 1)

    def block(h, wa, wb):
        return scale * torch.relu(torch.relu(h) @ wa.T) @ wb.T

    h = h_in
    for wa, wb in branches[:k]:
        h = h + block(h, wa, wb)
    x_k = h.detach()
    w2 = branches[k][1]
    u0 = branches[k][0] / mult  # the notebook's unit-variance first weight

    def branch_out(u):
        return torch.relu(torch.relu(x_k) @ (mult * u).T) @ w2.T

    u = u0.clone().requires_grad_(True)
    with torch.enable_grad():
        h = x_k + scale * branch_out(u)
        for wa, wb in branches[k + 1 :]:
            h = h + block(h, wa, wb)
        loss = torch.nn.functional.cross_entropy(h @ w_out.T, y)
        (g,) = torch.autograd.grad(loss, (u,))
    delta = -lr * g / (g.abs() + eps)
    with torch.enable_grad():
        u_req = u0.clone().requires_grad_(True)
        h0 = branch_out(u_req)[0, 0]
        (dh,) = torch.autograd.grad(h0, (u_req,))
    first_order = (delta[0, :] * dh).sum()  # the notebook's get_first_order_taylor
    h_lin = h0.detach() + first_order
    h1 = branch_out(u0 + delta)[0, 0]
    return float((h1 - h_lin).abs() / h_lin.abs())
