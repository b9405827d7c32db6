"""The outer loop shared by BudgetedPBCS and CADS: sample K selections, score them, take a clipped
Adam step on the policy parameter with cosine decay, project (spec section 2).

``BudgetedPBCS`` here is that loop around a value function ``value_fn(samples) -> [K]`` that
returns F(A_B(m_k)); with the least-squares reference that function is exact
(``LeastSquaresProblem.values``). The model-training value function (``budgeted_train`` and
``inner="converge"``) is not built yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._checks import check_float, check_generator, check_int
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient

__all__ = ["BudgetedPBCS", "PolicyOptimizer"]

Policy = BernoulliPolicy | TruncatedGaussianPolicy


def _param(policy: object) -> torch.Tensor:
    if isinstance(policy, BernoulliPolicy):
        return policy.s
    if isinstance(policy, TruncatedGaussianPolicy):
        return policy.mu
    raise TypeError(
        f"policy must be a BernoulliPolicy or TruncatedGaussianPolicy, got {type(policy).__name__}"
    )


class PolicyOptimizer:
    """Adam on the policy parameter (lr ``lr``, cosine decay over ``total_steps``), the gradient
    clipped to norm ``clip_norm`` first and the policy projected after each step."""

    def __init__(
        self, policy: Policy, lr: float = 0.05, clip_norm: float = 3.0, total_steps: int = 100
    ) -> None:
        self.param = _param(policy)
        lr = check_float("lr", lr)
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        clip_norm = check_float("clip_norm", clip_norm)
        if not clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
        total_steps = check_int("total_steps", total_steps, low=1)
        self.policy, self.clip_norm = policy, clip_norm
        self.adam = torch.optim.Adam([self.param], lr=lr)
        self.schedule = torch.optim.lr_scheduler.CosineAnnealingLR(self.adam, T_max=total_steps)

    def step(self, grad: torch.Tensor) -> float:
        """One descent step along ``grad`` (of the objective to minimise); returns its norm before clipping."""
        if not isinstance(grad, torch.Tensor) or grad.shape != self.param.shape:
            raise ValueError(f"grad must be a tensor of shape {tuple(self.param.shape)}")
        norm = torch.linalg.vector_norm(grad).item()
        scale = min(1.0, self.clip_norm / norm) if norm > 0 else 1.0
        self.param.grad = (grad * scale).to(self.param.dtype)
        self.adam.step()
        self.schedule.step()
        self.param.grad = None
        self.policy.project_()
        return norm


@dataclass
class BudgetedPBCS:
    """The conventional solver: each outer step runs the full budgeted training on K samples.

    ``value_fn(samples) -> values [K]`` must return F(A_B(m_k)) (validation loss after B steps on
    selection k). Defaults follow PBCS: K = 5, leave-one-out baseline, clip 3, Adam 5e-2, cosine.
    """

    value_fn: Callable[[torch.Tensor], torch.Tensor]
    policy: Policy
    outer_steps: int
    rollouts: int = 5
    lr: float = 0.05
    clip_norm: float = 3.0
    history: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not callable(self.value_fn):
            raise TypeError("value_fn must be callable")
        _param(self.policy)
        self.outer_steps = check_int("outer_steps", self.outer_steps, low=1)
        self.rollouts = check_int("rollouts", self.rollouts, low=1)
        if self.rollouts < 2:
            raise ValueError(
                f"rollouts must be >= 2 for the leave-one-out baseline, got {self.rollouts}"
            )

    def fit(self, generator: torch.Generator) -> Policy:
        """Run ``outer_steps`` policy steps; returns the policy (its parameter updated in place)."""
        check_generator(generator)
        opt = PolicyOptimizer(self.policy, self.lr, self.clip_norm, self.outer_steps)
        for step in range(self.outer_steps):
            samples = self.policy.sample(self.rollouts, generator)
            values = self.value_fn(samples)
            if not isinstance(values, torch.Tensor) or values.shape != (self.rollouts,):
                raise ValueError(f"value_fn must return a tensor of shape [{self.rollouts}]")
            grad = policy_gradient(values.double(), self.policy.score(samples))
            norm = opt.step(grad)
            self.history.append(
                {"step": step, "mean_value": values.mean().item(), "grad_norm": norm}
            )
        return self.policy
