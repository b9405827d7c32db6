"""The outer loop shared by BudgetedPBCS and CADS: sample K selections, score them, take a clipped
Adam step on the policy parameter with cosine decay, project (spec section 2).

``BudgetedPBCS`` here is that loop around a value function ``value_fn(samples) -> [K]`` that
returns F(A_B(m_k)); with the least-squares reference that function is exact
(``LeastSquaresProblem.values``); on a real model it is ``TrainingValue`` (``inner="budget"``:
B budgeted steps, the spec's conventional solver; ``inner="converge"``: train to convergence,
PBCS itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import check_float, check_generator, check_int
from .budget import Budget
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient
from .train import _dataset, budgeted_train, default_optimizer, train_to_convergence

__all__ = ["BudgetedPBCS", "PolicyOptimizer", "TrainingValue"]

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
    selection k). A value function with ``takes_seed = True`` (``TrainingValue``) is called as
    ``value_fn(samples, seed)`` with one seed per outer step drawn from ``fit``'s generator, the
    same draw CADS makes, so both solvers see the same masks and seeds. Defaults follow PBCS: K = 5, leave-one-out baseline, clip 3, Adam 5e-2, cosine.
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

    def fit(
        self,
        generator: torch.Generator,
        callback: Callable[[int, Policy], None] | None = None,
    ) -> Policy:
        """Run ``outer_steps`` policy steps; returns the policy (its parameter updated in place).
        ``callback(step, policy)``, if given, is called after each policy step."""
        check_generator(generator)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        opt = PolicyOptimizer(self.policy, self.lr, self.clip_norm, self.outer_steps)
        for step in range(self.outer_steps):
            samples = self.policy.sample(self.rollouts, generator)
            if getattr(self.value_fn, "takes_seed", False):
                # Common random numbers: one seed for every rollout's training, drawn as CADS does.
                crn = int(torch.randint(2**62, (1,), generator=generator))
                values = self.value_fn(samples, crn)
            else:
                values = self.value_fn(samples)
            if not isinstance(values, torch.Tensor) or values.shape != (self.rollouts,):
                raise ValueError(f"value_fn must return a tensor of shape [{self.rollouts}]")
            grad = policy_gradient(values.double(), self.policy.score(samples))
            norm = opt.step(grad)
            self.history.append(
                {
                    "step": step,
                    "values": values.tolist(),
                    "mean_value": values.mean().item(),
                    "grad_norm": norm,
                }
            )
            if callback is not None:
                callback(step, self.policy)
        return self.policy


class TrainingValue:
    """F(A(m_k)) by actually training, the value ``BudgetedPBCS`` needs on a real model.

    ``inner="budget"``: exactly ``budget.steps`` steps of ``budget.batch_size`` (``budgeted_train``),
    the spec's conventional budgeted solver. ``inner="converge"``: PBCS itself, train until the
    probe-batch loss improves by less than ``tol`` over ``check_every`` steps (at most ``max_steps``,
    default 20 B). Every rollout of a call trains from the same theta_0 with the same seed (common
    random numbers). ``samples`` are bool masks [K, n] or source weights [K, S] with ``sources``.
    ``steps_taken`` records the optimizer steps of each rollout (the solver's cost).
    """

    takes_seed = True

    def __init__(
        self,
        model_factory: Callable[[], nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        train_set: tuple[torch.Tensor, torch.Tensor],
        val_set: tuple[torch.Tensor, torch.Tensor],
        budget: Budget,
        optimizer_factory: Callable[[list], torch.optim.Optimizer] | None = None,
        inner: str = "budget",
        sources: torch.Tensor | None = None,
        check_every: int = 50,
        tol: float = 1e-3,
        max_steps: int | None = None,
    ) -> None:
        if not callable(model_factory) or not callable(loss_fn):
            raise TypeError("model_factory and loss_fn must be callable")
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
        if inner not in ("budget", "converge"):
            raise ValueError(f"inner must be 'budget' or 'converge', got {inner!r}")
        self.train_set = _dataset(train_set)
        try:
            self.x_val, self.y_val = _dataset(val_set)
        except (TypeError, ValueError) as err:
            raise type(err)(f"val_set: {err}") from None
        self.model_factory, self.loss_fn, self.budget, self.inner = (
            model_factory,
            loss_fn,
            budget,
            inner,
        )
        self.optimizer_factory = optimizer_factory or default_optimizer
        self.sources = sources
        self.check_every = check_int("check_every", check_every, low=1)
        self.tol = check_float("tol", tol)
        if not self.tol >= 0:
            raise ValueError(f"tol must be >= 0, got {self.tol}")
        self.max_steps = check_int(
            "max_steps", 20 * budget.steps if max_steps is None else max_steps, low=1
        )
        self.steps_taken: list[int] = []

    def __call__(self, samples: torch.Tensor, seed: int) -> torch.Tensor:
        seed = check_int("seed", seed, low=0)
        values = []
        for sel in samples:
            sel = sel if sel.dtype == torch.bool else sel.double()
            gen = torch.Generator().manual_seed(seed)
            if self.inner == "budget":
                model, _ = budgeted_train(
                    self.model_factory,
                    self.train_set,
                    sel,
                    self.budget,
                    self.optimizer_factory,
                    gen,
                    loss_fn=self.loss_fn,
                    sources=self.sources,
                )
                steps = self.budget.steps
            else:
                model, steps = train_to_convergence(
                    self.model_factory,
                    self.train_set,
                    sel,
                    self.budget.batch_size,
                    self.optimizer_factory,
                    gen,
                    check_every=self.check_every,
                    tol=self.tol,
                    max_steps=self.max_steps,
                    loss_fn=self.loss_fn,
                    sources=self.sources,
                )
            self.steps_taken.append(steps)
            with torch.no_grad():
                values.append(self.loss_fn(model(self.x_val), self.y_val).item())
        return torch.tensor(values, dtype=torch.float64)
