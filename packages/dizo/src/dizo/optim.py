"""MeZO and DiZO: forward-only fine-tuning of an ``nn.Module``.

>>> import torch
>>> from dizo import MeZO, MeZOConfig
>>> model = torch.nn.Linear(4, 1)
>>> x, y = torch.randn(8, 4), torch.randn(8, 1)
>>> opt = MeZO(model, MeZOConfig(lr=1e-2))
>>> loss = opt.step(lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), (x, y))
>>> isinstance(loss, float) and model.weight.grad is None
True
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from . import ops

DEFAULT_INCLUDE = r"self_attn\.(k|v)_proj\.weight$"
_NO_DECAY = ("bias", "layer_norm", "layernorm", "norm.weight")


@dataclass
class MeZOConfig:
    """MeZO hyper-parameters: ``theta <- theta - lr * (g * z + weight_decay * theta)``."""

    lr: float
    eps: float = 1e-3
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self):
        for name in ("lr", "eps", "weight_decay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise TypeError(f"{name}: expected a finite float, got {v!r}")
        if self.lr < 0:
            raise ValueError(f"lr: expected >= 0, got {self.lr}")
        if self.eps <= 0:
            raise ValueError(f"eps: expected > 0, got {self.eps}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay: expected >= 0, got {self.weight_decay}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected an int >= 0, got {self.seed!r}")


@dataclass
class DiZOConfig(MeZOConfig):
    """DiZO = MeZO plus a projection round every ``interval`` steps (official defaults)."""

    interval: int = 50
    proj_iters: int = 10
    proj_eps: float = 0.1
    proj_step_size: float = 2.0
    tau: float = 0.2
    include: str = DEFAULT_INCLUDE
    anchor_device: str | None = None
    train_embeddings: bool = True

    def __post_init__(self):
        super().__post_init__()
        if (
            isinstance(self.interval, bool)
            or not isinstance(self.interval, int)
            or self.interval < 1
        ):
            raise ValueError(f"interval: expected an int >= 1, got {self.interval!r}")
        if (
            isinstance(self.proj_iters, bool)
            or not isinstance(self.proj_iters, int)
            or self.proj_iters < 0
        ):
            raise ValueError(f"proj_iters: expected an int >= 0, got {self.proj_iters!r}")
        if not self.proj_eps > 0:
            raise ValueError(f"proj_eps: expected > 0, got {self.proj_eps}")
        if not self.proj_step_size >= 0:
            raise ValueError(f"proj_step_size: expected >= 0, got {self.proj_step_size}")
        if not 0 <= self.tau < 1:
            raise ValueError(f"tau: expected a value in [0, 1), got {self.tau}")
        try:
            re.compile(self.include)
        except (TypeError, re.error) as exc:
            raise ValueError(
                f"include: expected a regular expression, got {self.include!r} ({exc})"
            ) from None


def _dist():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


class MeZO:
    """Memory-efficient zeroth-order SGD (Malladi et al., 2023) over a module's trainable parameters.

    ``step(loss_fn, batch)`` perturbs the weights in place by ``+eps z``, ``-2 eps z``, ``+eps z``
    (z regenerated from a per-step seed, never stored), evaluates ``loss_fn(model, batch)`` twice
    under ``no_grad`` in eval mode, and applies the update. Under ``torch.distributed`` each rank
    passes its own shard; the two losses are averaged across ranks (two floats of communication)
    and the shared seed keeps every rank's weights identical.
    """

    _train_embeddings = True

    def __init__(self, model: nn.Module, config: MeZOConfig, backend: str | None = None):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
        if not isinstance(config, MeZOConfig):
            raise TypeError(f"config: expected a MeZOConfig, got {type(config).__name__}")
        self.model, self.config, self.backend = model, config, backend
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self._train_embeddings:
            named = [(n, p) for n, p in named if "embed_tokens" not in n]
        for n, p in named:
            if not p.is_floating_point():
                raise TypeError(
                    f"model: parameter {n!r} is {p.dtype}; zeroth-order training needs float parameters"
                )
        if not named:
            raise ValueError("model: has no trainable parameters")
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self._decay = [p for n, p in named if not any(k in n.lower() for k in _NO_DECAY)]
        self._seeds = torch.Generator().manual_seed(config.seed)
        self.step_count = 0
        self.forward_passes = 0
        self.last_projected_grad = 0.0

    def _loss(self, loss_fn, batch) -> float:
        out = loss_fn(self.model, batch)
        if not isinstance(out, torch.Tensor) or out.numel() != 1 or out.ndim > 1:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"loss_fn: expected a scalar tensor, got {got}")
        self.forward_passes += 1
        return float(out)

    def _pair(self, lp: float, lm: float) -> tuple[float, float]:
        dist = _dist()
        if dist is None:
            return lp, lm
        t = torch.tensor([lp, lm], dtype=torch.float64)
        dist.all_reduce(t)
        t /= dist.get_world_size()
        return float(t[0]), float(t[1])

    @torch.no_grad()
    def step(self, loss_fn: Callable[[nn.Module, Any], torch.Tensor], batch: Any) -> float:
        """One SPSA step on ``batch``; returns the (rank-averaged) loss at ``theta + eps z``."""
        if not callable(loss_fn):
            raise TypeError(f"loss_fn: expected a callable, got {type(loss_fn).__name__}")
        was_training = self.model.training
        self.model.eval()
        eps, cfg = self.config.eps, self.config
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._seeds))
        try:
            ops.perturb_(self.params, seed, eps, backend=self.backend)
            lp = self._loss(loss_fn, batch)
            ops.perturb_(self.params, seed, -2 * eps, backend=self.backend)
            lm = self._loss(loss_fn, batch)
            ops.perturb_(self.params, seed, eps, backend=self.backend)
        finally:
            self.model.train(was_training)
        lp, lm = self._pair(lp, lm)
        g = (lp - lm) / (2 * eps)
        if not math.isfinite(g):
            raise FloatingPointError(f"projected gradient is {g} (losses {lp}, {lm})")
        if cfg.weight_decay > 0:
            for p in self._decay:
                p.mul_(1 - cfg.lr * cfg.weight_decay)
        ops.perturb_(self.params, seed, -cfg.lr * g, backend=self.backend)
        self.last_projected_grad = g
        self.step_count += 1
        self._after_step(loss_fn)
        return lp

    def _after_step(self, loss_fn) -> None:
        pass

    def state_dict(self) -> dict:
        return {
            "kind": type(self).__name__,
            "config": asdict(self.config),
            "names": list(self.names),
            "step_count": self.step_count,
            "forward_passes": self.forward_passes,
            "seed_state": self._seeds.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") != type(self).__name__:
            raise ValueError(
                f"state: expected a {type(self).__name__} state, got {state.get('kind')!r}"
            )
        if state.get("names") != self.names:
            raise ValueError("state: parameter names differ from this model's trainable parameters")
        if state.get("config") != asdict(self.config):
            raise ValueError(
                f"state: config {state.get('config')} differs from {asdict(self.config)}"
            )
        self.step_count = state["step_count"]
        self.forward_passes = state["forward_passes"]
        self._seeds.set_state(state["seed_state"])


class DiZO(MeZO):
    """DiZO (Tan et al., NeurIPS 2025): MeZO plus a divergence-driven projection round.

    After every ``interval``-th step, each selected tensor's displacement from the anchor (the
    weights at construction) is rescaled by ``gamma_l / t_l``, with ``gamma_l`` learned from
    ``proj_iters`` zeroth-order iterations on batches drawn from ``projection_batches`` and
    clipped to ``[(1 - tau) t_l, (1 + tau) t_l]``. Selected: trainable tensors matching
    ``config.include``, or every trainable LoRA tensor (names containing ``lora_``) when the model
    has them. Anchors of selected tensors live on ``anchor_device`` (default: the parameter's
    device), the rest on CPU (kept only for :func:`dizo.divergence`).
    """

    def __init__(
        self,
        model: nn.Module,
        config: DiZOConfig,
        projection_batches: Iterable[Any],
        backend: str | None = None,
    ):
        if not isinstance(config, DiZOConfig):
            raise TypeError(f"config: expected a DiZOConfig, got {type(config).__name__}")
        self._train_embeddings = config.train_embeddings
        super().__init__(model, config, backend)
        if projection_batches is None or not isinstance(projection_batches, Iterable):
            raise TypeError("projection_batches: expected an iterable of batches (it is cycled)")
        lora = [i for i, n in enumerate(self.names) if "lora_" in n]
        pattern = re.compile(config.include)
        idx = lora if lora else [i for i, n in enumerate(self.names) if pattern.search(n)]
        if not idx:
            raise ValueError(
                f"include: {config.include!r} matches none of the {len(self.names)} trainable parameters "
                f"(e.g. {self.names[:3]})"
            )
        self.selected_names = [self.names[i] for i in idx]
        self.selected = [self.params[i] for i in idx]
        self.anchors = [
            p.detach().clone().to(config.anchor_device if config.anchor_device else p.device)
            for p in self.selected
        ]
        self._batches = (
            itertools.cycle(projection_batches)
            if isinstance(projection_batches, (list, tuple))
            else iter(projection_batches)
        )
        self._u = torch.Generator().manual_seed(config.seed + 1)
        self.ratios = torch.ones(len(self.selected), dtype=torch.float64)
        self.rounds = 0

    def _after_step(self, loss_fn) -> None:
        if self.step_count % self.config.interval == 0:
            self.project_now(loss_fn)

    @torch.no_grad()
    def project_now(
        self, loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Run one projection round now; returns the applied ratios ``gamma_l / t_l``."""
        loss_fn = loss_fn if loss_fn is not None else getattr(self, "_last_loss_fn", None)
        if loss_fn is None:
            raise ValueError("loss_fn: project_now() needs a loss_fn before the first step")
        self._last_loss_fn = loss_fn
        cfg = self.config
        t = ops.displacement_norms(self.selected, self.anchors, backend=self.backend)
        dist = _dist()
        if dist is not None:  # identical on every rank already; keep it exactly so
            dist.broadcast(t, 0)
        live = t > 0
        gamma = t.clone()
        bound = cfg.tau / cfg.proj_eps * t

        def ratios(gam):
            return [float(gam[i] / t[i]) if live[i] else 1.0 for i in range(len(t))]

        def undo(rs):
            ops.project_(
                self.selected,
                self.anchors,
                [1.0 / r if r != 1.0 else 1.0 for r in rs],
                backend=self.backend,
            )

        was_training = self.model.training
        self.model.eval()
        try:
            for _ in range(cfg.proj_iters):
                batch = next(self._batches)
                u = torch.randn(len(t), generator=self._u, dtype=torch.float64)
                u = torch.maximum(torch.minimum(u, bound), -bound)
                out = []
                for sign in (1.0, -1.0):
                    rs = ratios(gamma + sign * cfg.proj_eps * u)
                    ops.project_(self.selected, self.anchors, rs, backend=self.backend)
                    out.append(self._loss(loss_fn, batch))
                    undo(rs)
                lp, lm = self._pair(*out)
                h = (lp - lm) / (2 * cfg.proj_eps)
                gamma = torch.minimum(
                    torch.maximum(gamma - cfg.proj_step_size * t * h * u, (1 - cfg.tau) * t),
                    (1 + cfg.tau) * t,
                )
        finally:
            self.model.train(was_training)
        rs = ratios(gamma)
        ops.project_(self.selected, self.anchors, rs, backend=self.backend)
        self.ratios = torch.tensor(rs, dtype=torch.float64)
        self.rounds += 1
        return self.ratios

    def state_dict(self) -> dict:
        s = super().state_dict()
        s.update(
            selected_names=list(self.selected_names),
            anchors=[a.detach().cpu().clone() for a in self.anchors],
            ratios=self.ratios.clone(),
            rounds=self.rounds,
            u_state=self._u.get_state(),
        )
        return s

    def load_state_dict(self, state: dict) -> None:
        if state.get("selected_names") != self.selected_names:
            raise ValueError("state: projected tensors differ from this optimizer's selection")
        for i, (a, b) in enumerate(zip(state["anchors"], self.anchors)):
            if a.shape != b.shape:
                raise ValueError(
                    f"state: anchor {i} has shape {tuple(a.shape)}, expected {tuple(b.shape)}"
                )
        super().load_state_dict(state)
        for a, b in zip(self.anchors, state["anchors"]):
            a.copy_(b)
        self.ratios = state["ratios"].clone()
        self.rounds = state["rounds"]
        self._u.set_state(state["u_state"])
