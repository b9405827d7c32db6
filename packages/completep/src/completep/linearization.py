"""Fig. 6's toy: how far one Adam step moves a residual branch from its linearization, vs depth.

A read-in (N(0,1)/√D), ``depth`` residual branches x ← x + m_L^-α·W₂·relu(W₁·relu(x)) with
N(0, 2/N) weights, m_L = depth/2, and a read-out (N(0,1)/N) on scikit-learn's digits. One Adam step
(lr = lr_base·N^-½·m_L^(α−1), ε = eps_base·m_L^-α) on branch 1's two weights (W₁, W₂); the
metric is |h₁ − h_lin| / |h_lin| for sample 0, unit 0 of branch 1's output, with
h_lin = h₀ + ⟨ΔW, ∂h/∂W⟩.

Deviation from the spec, which steps W₁ alone: with ReLU the branch is piecewise linear in W₁, so
a W₁-only step is exactly linear up to rare kink crossings (we measured 1e-16, i.e. rounding, at
every depth). Stepping both weights gives the bilinear second-order term the figure measures. The
official notebook was not checked.
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
        step: ``"both"`` steps W₁ and W₂ of branch 1; ``"first"`` steps W₁ only (the spec's
            reading, exactly linear for ReLU up to kink crossings).

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
    if step not in ("both", "first"):
        raise ValueError(f"step: expected 'both' or 'first', got {step!r}")
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
