"""The CADS penalty solver (spec section 2, *[design]* parts are our reconstruction).

One outer iteration:
1. sample K selections from p_s (common random numbers: every rollout's probe uses the same
   theta_0, the same seed for batch order and probe batch);
2. v_B(m_k) from a probe of ceil(tau B) budgeted steps, the loss on a fixed probe batch at ~6
   log-spaced checkpoints and ``budget_min`` (log-linear);
3. ``theta_steps`` SGD steps of the persistent theta on F(theta) + lambda/K sum_k G(theta; m_k);
4. P_k = G(theta; m_k) - v_B(m_k), the leave-one-out policy gradient, a clipped Adam step, projection.

Under an initialised ``torch.distributed`` group the K probes are split across ranks (rollout k
on rank k % world); their values are summed across ranks and every rank takes the same theta and
policy steps, so the trajectory equals one process (tested with two gloo processes).

``CADSConfig(vectorize=True)`` trains the K probes as one ``torch.func.vmap`` over stacked
parameters (``cads.vmap``) with the same batches, hence the same values as the loop (tested).

``value="exact"`` replaces P_k by F(A_{ceil(tau B)}(m_k)), the validation loss of the probe model
itself, and skips the theta steps: at tau = 1 the probe is A_B(m_k) and CADS reduces to
``BudgetedPBCS`` with ``TrainingValue(inner="budget")`` (same masks, seeds and policy steps; tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import check_generator, check_int
from .budget import Budget, budget_min
from .config import CADSConfig
from .outer import PolicyOptimizer
from .policies import BernoulliPolicy, TruncatedGaussianPolicy, policy_gradient
from .train import _dataset, _selection, budgeted_train, default_optimizer
from .vmap import budgeted_train_vmapped

__all__ = ["CADS", "Selection"]


@dataclass
class Selection:
    """The result: ``mask`` (CADS-E, s >= 0.5) or ``weights`` (CADS-S, the means mu), the policy
    parameter and the per-iteration history."""

    param: torch.Tensor
    mask: torch.Tensor | None
    weights: torch.Tensor | None
    history: list[dict] = field(default_factory=list)


def _rank_world() -> tuple[int, int]:
    """This process's rank and the world size under an initialised ``torch.distributed`` group
    (0, 1 otherwise)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _checkpoints(steps: int) -> list[int]:
    ticks = {max(1, round(math.exp(v))) for v in torch.linspace(0.0, math.log(steps), 6).tolist()}
    return sorted(t for t in ticks if t <= steps)


class CADS:
    """CADS-E (``granularity="example"``) or CADS-S (``"source"``, needs ``sources``).

    ``model_factory()`` must build the same theta_0 on every call; ``optimizer_factory(params)``
    is the inner optimizer (also used for theta's steps); ``loss_fn(logits, targets)`` is both the
    training loss G and the validation loss F.
    """

    def __init__(
        self,
        model_factory: Callable[[], nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        train_set: tuple[torch.Tensor, torch.Tensor],
        val_set: tuple[torch.Tensor, torch.Tensor],
        config: CADSConfig,
        sources: torch.Tensor | None = None,
        optimizer_factory: Callable[[list], torch.optim.Optimizer] | None = None,
        theta_steps: int = 2,
        value: str = "penalty",
    ) -> None:
        if not isinstance(config, CADSConfig):
            raise TypeError(f"config must be a CADSConfig, got {type(config).__name__}")
        if not callable(model_factory) or not callable(loss_fn):
            raise TypeError("model_factory and loss_fn must be callable")
        self.x, self.y = _dataset(train_set)
        try:
            self.x_val, self.y_val = _dataset(val_set)
        except (TypeError, ValueError) as err:
            raise type(err)(f"val_set: {err}") from None
        n = self.x.shape[0]
        if config.granularity == "source":
            if sources is None:
                raise ValueError("sources is required with granularity='source'")
            if (
                not isinstance(sources, torch.Tensor)
                or sources.dtype not in (torch.int32, torch.int64)
                or sources.shape != (n,)
            ):
                raise TypeError(f"sources must be an int tensor of shape [{n}]")
            if sources.min() < 0:
                raise ValueError("sources must be >= 0")
            self.S = int(sources.max()) + 1
            self.policy: BernoulliPolicy | TruncatedGaussianPolicy = TruncatedGaussianPolicy(self.S)
        else:
            self.policy = BernoulliPolicy(n)
        self.sources = sources
        self.model_factory, self.loss_fn, self.config = model_factory, loss_fn, config
        self.optimizer_factory = optimizer_factory or default_optimizer
        self.theta_steps = check_int("theta_steps", theta_steps, low=1)
        if value not in ("penalty", "exact"):
            raise ValueError(f"value must be 'penalty' or 'exact', got {value!r}")
        self.value = value

    def _probe_indices(self, selection: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        pools, probs = _selection(selection, self.x.shape[0], self.sources)
        size = min(256, 8 * self.config.budget.batch_size)
        g = torch.multinomial(probs, size, replacement=True, generator=gen)
        return torch.cat(
            [pools[int(i)][torch.randint(pools[int(i)].numel(), (1,), generator=gen)] for i in g]
        )

    def fit(
        self,
        generator: torch.Generator,
        callback: Callable[[int, BernoulliPolicy | TruncatedGaussianPolicy], None] | None = None,
    ) -> Selection:
        """Run ``config.outer_steps`` outer iterations; ``callback(step, policy)``, if given, is
        called after each policy step (the speed benchmark deploys the selection there)."""
        check_generator(generator)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        cfg = self.config
        probe = Budget(cfg.probe_steps, cfg.budget.batch_size)
        ticks = _checkpoints(cfg.probe_steps)
        theta = self.model_factory()
        theta_opt = self.optimizer_factory(list(theta.parameters()))
        opt = PolicyOptimizer(self.policy, cfg.outer_lr, cfg.clip_norm, cfg.outer_steps)
        history: list[dict] = []
        for step in range(cfg.outer_steps):
            samples = self.policy.sample(cfg.rollouts, generator)
            crn = int(torch.randint(2**62, (1,), generator=generator))
            selections = [s.double() if cfg.granularity == "source" else s for s in samples]
            # Rollout k runs on rank k % world (all ranks drew the same masks and seed); the
            # values are summed across ranks (zeros elsewhere, so the sum is exact).
            rank, world = _rank_world()
            probes = [
                self._probe_indices(sel, torch.Generator().manual_seed(crn + 1))
                for sel in selections
            ]
            inner = torch.zeros(len(selections), dtype=torch.float64)
            exact = torch.zeros(len(selections), dtype=torch.float64)
            method = "loglinear" if len(ticks) >= 3 else "observed"
            if cfg.vectorize:
                mine = [k for k in range(len(selections)) if k % world == rank]
                curves, evals = budgeted_train_vmapped(
                    self.model_factory,
                    (self.x, self.y),
                    [selections[k] for k in mine],
                    probe,
                    self.optimizer_factory,
                    [crn] * len(mine),
                    checkpoints=ticks,
                    loss_fn=self.loss_fn,
                    sources=self.sources,
                    eval_set=(self.x_val, self.y_val) if self.value == "exact" else None,
                )
                for i, k in enumerate(mine):
                    inner[k] = float(budget_min(curves[i], cfg.budget, method=method))
                    if evals is not None:
                        exact[k] = evals[i].item()
            for k, sel in enumerate(selections):
                if cfg.vectorize or k % world != rank:
                    continue
                model, curve = budgeted_train(
                    self.model_factory,
                    (self.x, self.y),
                    sel,
                    probe,
                    self.optimizer_factory,
                    torch.Generator().manual_seed(crn),
                    checkpoints=ticks,
                    loss_fn=self.loss_fn,
                    sources=self.sources,
                )
                inner[k] = float(budget_min(curve, cfg.budget, method=method))
                if self.value == "exact":
                    with torch.no_grad():
                        exact[k] = self.loss_fn(model(self.x_val), self.y_val).item()
            if world > 1:
                import torch.distributed as dist

                dist.all_reduce(inner)
                dist.all_reduce(exact)
            if self.value == "exact":
                values = exact
                norm = opt.step(policy_gradient(values, self.policy.score(samples)))
                history.append(
                    {
                        "step": step,
                        "values": values.tolist(),
                        "mean_value": values.mean().item(),
                        "grad_norm": norm,
                    }
                )
                if callback is not None:
                    callback(step, self.policy)
                continue
            with torch.enable_grad():
                theta.train()
                for _ in range(self.theta_steps):
                    theta_opt.zero_grad(set_to_none=True)
                    train_term = sum(
                        self.loss_fn(theta(self.x[i]), self.y[i]) for i in probes
                    ) / len(probes)
                    (
                        self.loss_fn(theta(self.x_val), self.y_val) + cfg.penalty * train_term
                    ).backward()
                    theta_opt.step()
            with torch.no_grad():
                g_theta = torch.tensor(
                    [self.loss_fn(theta(self.x[i]), self.y[i]).item() for i in probes],
                    dtype=torch.float64,
                )
                val = self.loss_fn(theta(self.x_val), self.y_val).item()
            values = g_theta - inner
            norm = opt.step(policy_gradient(values, self.policy.score(samples)))
            history.append(
                {
                    "step": step,
                    "val_loss_theta": val,
                    "mean_penalty": values.mean().item(),
                    "grad_norm": norm,
                }
            )
            if callback is not None:
                callback(step, self.policy)
        if cfg.granularity == "source":
            return Selection(self.policy.mu.clone(), None, self.policy.mu.clone(), history)
        return Selection(self.policy.s.clone(), self.policy.s >= 0.5, None, history)
