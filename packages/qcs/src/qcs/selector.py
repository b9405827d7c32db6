"""``QCSSelector``: the outer loop (single process).

Each outer step draws ``K`` masks, trains one rollout per mask with ``train_fn(weights [n, T])``
and scores it with ``eval_fn(model) -> float``, forms the hierarchical REINFORCE gradient, clips
its global norm, takes an Adam step (``torch.optim.Adam`` with ``CosineAnnealingLR``) and
projects onto the budgets. With ``token_ratio == 1`` only ``s`` is optimised (sequence-level
PBCS). Common random numbers: the K rollouts of a step run under the same torch RNG seed
(``torch.random.fork_rng``), so they differ only in their weights.

Distributed: when a ``torch.distributed`` process group is up (and ``distributed`` is not False),
every rank draws the same masks from the same seed, rank ``r`` runs the rollouts ``k ≡ r (mod
world)``, the ``F`` vector is summed across ranks (each entry is non-zero on one rank only, so the
sum is an exact all-gather) and every rank takes the same policy step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from .ops import (
    HierarchicalBernoulliPolicy,
    QCSConfig,
    Selection,
    hierarchical_policy_gradient,
    token_weights,
)

__all__ = ["QCSSelector"]


def _takes_steps(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins / C callables: no introspection
        return False
    return "steps" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class QCSSelector:
    """Learn ``s, t`` by hierarchical policy gradients, then keep the final coreset.

    The final coreset is ``config.final``: ``"topk"`` (top-m sequences by ``s``, top-⌈αT_i⌉
    tokens by ``t``) or ``"sample"`` (``config.sample_times`` masks drawn from the learned policy,
    each trained and scored like a rollout under one common seed, the lowest ``F`` kept; its
    scores are in ``final_scores``). A ``train_fn`` with a ``steps`` keyword gets
    ``steps=config.inner_steps``.

    Args:
        train_fn: ``weights [n, T] -> model``; fine-tunes from the same start point with the
            elastic token weights (zero rows for unselected sequences).
        eval_fn: ``model -> float``, the outer objective ``F`` (lower is better).
        config: :class:`~qcs.QCSConfig`.
        seed: seeds the mask generator and the per-step rollout seeds.
        dtype: dtype of ``s, t`` (float64 for references).
        distributed: split the rollouts across ranks; ``None`` = when a process group is up.
        keep_trajectory: also keep ``t`` per step in ``history`` (``s`` is always kept).
    """

    def __init__(
        self,
        train_fn: Callable,
        eval_fn: Callable,
        config: QCSConfig,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        distributed: bool | None = None,
        keep_trajectory: bool = False,
    ) -> None:
        if not callable(train_fn):
            raise TypeError(f"train_fn: expected a callable, got {type(train_fn).__name__}")
        if not callable(eval_fn):
            raise TypeError(f"eval_fn: expected a callable, got {type(eval_fn).__name__}")
        if not isinstance(config, QCSConfig):
            raise TypeError(f"config: expected a QCSConfig, got {type(config).__name__}")
        self.train_fn, self.eval_fn, self.config = train_fn, eval_fn, config
        self.seed, self.dtype = int(seed), dtype
        self.distributed, self.keep_trajectory = distributed, bool(keep_trajectory)
        self.policy: HierarchicalBernoulliPolicy | None = None
        self.history: list[dict] = []
        self.final_scores: torch.Tensor | None = None
        self._pass_steps = _takes_steps(train_fn)

    def _rollout(self, c: torch.Tensor, seed: int) -> float:
        """``F`` of one weighted rollout under the torch seed ``seed`` (common random numbers)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if self._pass_steps:
                model = self.train_fn(c, steps=self.config.inner_steps)
            else:
                model = self.train_fn(c)
            return float(self.eval_fn(model))

    def fit(self, pool) -> Selection:
        """Run ``config.outer_steps`` steps on ``pool``: the lengths ``[n]``, or anything with
        ``token_lengths`` (an attribute, or a key of an :func:`~qcs.tasks.encode_pairs` dict)."""
        if isinstance(pool, dict):
            if "token_lengths" not in pool:
                raise ValueError("pool: a dict pool must hold 'token_lengths' (encode_pairs)")
            lengths = pool["token_lengths"]
        else:
            lengths = getattr(pool, "token_lengths", pool)
        cfg = self.config
        pol = HierarchicalBernoulliPolicy(lengths, cfg.budget, cfg.token_ratio, dtype=self.dtype)
        self.policy = pol
        seq_only = cfg.token_ratio == 1.0
        s = pol.s.clone().requires_grad_(True)
        t = pol.t.clone().requires_grad_(True)
        params = [s] if seq_only else [s, t]
        opt = torch.optim.Adam(params, lr=cfg.outer_lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.outer_steps)
        gen = torch.Generator().manual_seed(self.seed)
        self.history = []
        dist = torch.distributed
        split = dist.is_available() and dist.is_initialized() and self.distributed is not False
        rank, world = (dist.get_rank(), dist.get_world_size()) if split else (0, 1)
        for step in range(cfg.outer_steps):
            w, v = pol.sample(cfg.rollouts, gen)
            F_values = torch.zeros(cfg.rollouts, dtype=torch.float64)
            for k in range(rank, cfg.rollouts, world):
                c = token_weights(w[k], v[k], cfg.elastic_eps, pol.token_mask).to(self.dtype)
                F_values[k] = self._rollout(c, self.seed * 1_000_003 + step)
            if world > 1:
                dist.all_reduce(F_values, op=dist.ReduceOp.SUM)
            g_s, g_t = hierarchical_policy_gradient(
                F_values, w, v, pol.s, pol.t, pol.token_mask, cfg.baseline
            )
            s.grad = g_s.to(self.dtype).clone()
            t.grad = None if seq_only else g_t.to(self.dtype).clone()
            torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
            opt.step()
            sched.step()
            with torch.no_grad():
                pol.s, pol.t = s.detach().clone(), t.detach().clone()
                pol.project_()
                s.copy_(pol.s)
                t.copy_(pol.t)
            record = {"step": step, "F_mean": float(F_values.mean()), "s": pol.s.clone()}
            if self.keep_trajectory:
                record["t"] = pol.t.clone()
            self.history.append(record)
        self.final_scores = None
        if cfg.final == "topk":
            return pol.select_topk()
        return self._select_by_sampling(pol, gen, rank, world)

    def _select_by_sampling(self, pol, gen, rank: int, world: int) -> Selection:
        """PBCS's final step: ``sample_times`` masks from the policy, the best by ``F`` kept.

        Every candidate trains under the same seed (common random numbers), split across ranks
        like the rollouts. A candidate with no sequence is never kept (``F = inf``).
        """
        cfg = self.config
        w, v = pol.sample(cfg.sample_times, gen)
        scores = torch.zeros(cfg.sample_times, dtype=torch.float64)
        seed = self.seed * 1_000_003 + cfg.outer_steps
        for k in range(rank, cfg.sample_times, world):
            if not bool(w[k].any()):
                scores[k] = float("inf")
                continue
            c = token_weights(w[k], v[k], cfg.elastic_eps, pol.token_mask).to(self.dtype)
            scores[k] = self._rollout(c, seed)
        if world > 1:
            torch.distributed.all_reduce(scores, op=torch.distributed.ReduceOp.SUM)
        if not bool(torch.isfinite(scores).any()):
            raise ValueError(
                "final: every sampled mask was empty; raise sample_times or use final='topk'"
            )
        best = int(torch.argmin(scores))  # first minimum: ties break towards the first draw
        self.final_scores = scores
        seq_idx = torch.nonzero(w[best]).squeeze(1)
        return Selection(sequence_idx=seq_idx, token_mask=v[best] & w[best][:, None])
