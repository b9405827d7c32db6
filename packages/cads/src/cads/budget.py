"""The compute budget and the CADS penalty form's inner value v_B (spec section 2).

The budget is B optimizer steps at a fixed batch size, never epochs. The penalty form replaces the
inner problem's optimality by its optimal value under the budget, v_B(m) = min_{0<t<=B} g_m(t),
estimated from a short probe by a log-linear fit g_m(t) ~ a - b ln t (*[design]*, spec section 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._checks import check_int, check_tensor

__all__ = ["Budget", "budget_min", "fit_loglinear", "penalty_values"]


@dataclass(frozen=True)
class Budget:
    """``steps`` optimizer steps at ``batch_size`` examples each: compute is steps * batch_size.

    >>> Budget(100, 32).examples
    3200
    """

    steps: int
    batch_size: int

    def __post_init__(self) -> None:
        check_int("steps", self.steps, low=1)
        check_int("batch_size", self.batch_size, low=1)

    @property
    def examples(self) -> int:
        """Example-gradients the budget pays for, whatever the subset size."""
        return self.steps * self.batch_size


def _budget_steps(budget: object) -> int:
    if isinstance(budget, Budget):
        return budget.steps
    return check_int("budget", budget, low=1)


def _curve(t: object, loss: object) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.as_tensor(t, dtype=torch.float64) if not isinstance(t, torch.Tensor) else t.double()
    loss = check_tensor(
        "loss",
        loss if isinstance(loss, torch.Tensor) else torch.as_tensor(loss, dtype=torch.float64),
    )
    loss = loss.double()
    if t.ndim != 1 or loss.ndim != 1 or t.shape != loss.shape:
        raise ValueError(
            f"t and loss must be 1-D of the same length, got shapes {tuple(t.shape)} and {tuple(loss.shape)}"
        )
    if not torch.isfinite(loss).all():
        raise ValueError("loss must be finite")
    return t, loss


def fit_loglinear(t: object, loss: object) -> tuple[float, float]:
    """Least-squares fit of ``loss ~ a - b ln t`` (float64); returns ``(a, b)``.

    ``t`` are step counts (at least 3 distinct values, all >= 1: t = 0 has no log and is excluded
    by the caller). Exact on data that lie on such a curve.

    >>> a, b = fit_loglinear([1, 2, 4, 8], [3 - 0.5 * math.log(v) for v in (1, 2, 4, 8)])
    >>> round(a, 9), round(b, 9)
    (3.0, 0.5)
    """
    t, loss = _curve(t, loss)
    if t.numel() < 3:
        raise ValueError(f"t needs at least 3 checkpoints for a log-linear fit, got {t.numel()}")
    if (t < 1).any():
        raise ValueError(f"t must be >= 1 (exclude t = 0), got min {t.min().item()}")
    if torch.unique(t).numel() < 2:
        raise ValueError("t must hold at least 2 distinct step counts")
    design = torch.stack([torch.ones_like(t), -torch.log(t)], dim=1)
    coef = torch.linalg.lstsq(design, loss.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    return coef[0].item(), coef[1].item()


def budget_min(
    curve: tuple[object, object], budget: Budget | int, method: str = "loglinear"
) -> float:
    """v_B: the smallest training loss reachable within ``budget`` steps, from a probe ``curve``.

    ``curve`` is ``(t, loss)``: step counts and the loss on a fixed probe batch there. Checkpoints
    beyond the budget are refused. ``method="observed"`` takes the smallest observed loss;
    ``"loglinear"`` fits ``a - b ln t`` and takes ``a - b ln B`` where ``b > 0`` (the fitted curve's
    minimum over [t_probe, B]), never above the smallest observed loss (observed values are
    attainable within the budget), and falls back to that observed minimum when ``b <= 0``. Both
    are non-increasing in B.
    """
    if not isinstance(curve, (tuple, list)) or len(curve) != 2:
        raise TypeError("curve must be a pair (t, loss)")
    steps = _budget_steps(budget)
    if method not in ("loglinear", "observed"):
        raise ValueError(f"method must be 'loglinear' or 'observed', got {method!r}")
    t, loss = _curve(*curve)
    if t.numel() == 0:
        raise ValueError("curve must hold at least one checkpoint")
    if (t > steps).any():
        raise ValueError(f"curve has checkpoints beyond the budget ({t.max().item():g} > {steps})")
    observed = loss.min().item()
    if method == "observed":
        return observed
    keep = t >= 1
    a, b = fit_loglinear(t[keep], loss[keep])
    if b <= 0:
        return observed
    return min(a - b * math.log(steps), observed)


def penalty_values(train_losses: torch.Tensor, inner_values: torch.Tensor) -> torch.Tensor:
    """P_k = G(theta; m_k) - v_B(m_k): the per-rollout value the CADS policy gradient uses.

    F(theta) is common to all rollouts and cancels in the leave-one-out baseline, so it is left
    out; the penalty weight lambda only scales the s-gradient, which Adam undoes.
    """
    g = check_tensor("train_losses", train_losses, ndim=1)
    v = check_tensor("inner_values", inner_values, ndim=1)
    if g.shape != v.shape:
        raise ValueError(
            f"train_losses and inner_values must match, got {tuple(g.shape)} and {tuple(v.shape)}"
        )
    return g - v
