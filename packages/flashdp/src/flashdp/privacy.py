"""The integration a user touches: config, ``make_private``, the DP optimizer, accounting, sampling.

Typical use (CPU)::

    model = make_private(model, FlashDPConfig(max_grad_norm=1.0, noise_multiplier=1.1))
    opt = DPOptimizer(
        torch.optim.AdamW(model.parameters(), 1e-3),
        model,
        config,
        expected_batch_size=64,
        accountant=PrivacyAccountant("rdp"),
        sample_rate=q,
    )
    for idx in PoissonSampler(len(data), q, steps, seed=0):
        per_sample_lm_loss(model(x[idx]).logits, y[idx]).mean().backward()
        opt.step()
        opt.zero_grad()
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from . import layers
from .ops import check_backend, check_chunk_bytes, check_max_norm

ALLOCATIONS = ("per_group", "split")


@dataclasses.dataclass
class FlashDPConfig:
    """How FlashDP clips and noises.

    Attributes:
        max_grad_norm: C > 0, the per-group threshold (``"per_group"``) or the total (``"split"``).
        noise_multiplier: σ >= 0; the noise std on the summed gradient is σ·C_tot.
        allocation: ``"per_group"`` (C_k = C, the official code) or ``"split"`` (C_k = C/√K).
        clip_eps: ξ in ``min(1, C_k / (‖g‖ + ξ))`` (Opacus's 1e-6; the official code uses 1e-10).
        loss_reduction: ``"mean"`` (the loss is the batch mean of per-sample losses) or ``"sum"``.
        target_modules: None (every supported module), or module names / types to wrap.
        skip: module names left as they are (their parameters must then be frozen under strict).
        strict: refuse tied weights and trainable parameters outside DP layers.
        backend: the linear weight-gradient backend of :func:`flashdp.ops.clipped_linear_weight_grad`.
        chunk_bytes: the per-chunk scratch budget (default 2·|W|).

    Example:
        >>> FlashDPConfig(max_grad_norm=1.0, noise_multiplier=0.5).allocation
        'per_group'
    """

    max_grad_norm: float
    noise_multiplier: float
    allocation: str = "per_group"
    clip_eps: float = 1e-6
    loss_reduction: str = "mean"
    target_modules: Sequence[str | type] | None = None
    skip: Sequence[str] = ()
    strict: bool = True
    backend: str | None = None
    chunk_bytes: int | None = None

    def __post_init__(self) -> None:
        self.max_grad_norm = check_max_norm(self.max_grad_norm, "max_grad_norm")
        nm = self.noise_multiplier
        if isinstance(nm, bool) or not isinstance(nm, numbers.Real):
            raise TypeError(f"noise_multiplier: expected a number >= 0, got {type(nm).__name__}")
        if not (math.isfinite(nm) and nm >= 0):
            raise ValueError(f"noise_multiplier: expected a finite number >= 0, got {nm}")
        self.noise_multiplier = float(nm)
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation: expected one of {ALLOCATIONS}, got {self.allocation!r}")
        if not (isinstance(self.clip_eps, numbers.Real) and self.clip_eps >= 0):
            raise ValueError(f"clip_eps: expected a number >= 0, got {self.clip_eps!r}")
        if self.loss_reduction not in ("mean", "sum"):
            raise ValueError(
                f"loss_reduction: expected 'mean' or 'sum', got {self.loss_reduction!r}"
            )
        if isinstance(self.skip, str):
            raise TypeError("skip: expected a sequence of module names, got a single string")
        check_backend(self.backend)
        self.chunk_bytes = check_chunk_bytes(self.chunk_bytes)


def _selected(name: str, module: nn.Module, targets) -> bool:
    if targets is None:
        return layers.supported(module)
    return any(
        (isinstance(t, str) and (name == t or name.endswith("." + t)))
        or (isinstance(t, type) and type(module) is t)
        for t in targets
    )


def make_private(model: nn.Module, config: FlashDPConfig) -> nn.Module:
    """Swap the supported modules of ``model`` for DP layers, in place, and return it.

    The DP layers share the original parameters (same state-dict keys). Every trainable tensor of
    a DP layer is one clipping group; ``dp_groups(model)`` lists them with their thresholds.

    Args:
        model: any ``nn.Module`` (a transformers model, a ``Sequential``, ...).
        config: a :class:`FlashDPConfig`.

    Raises:
        TypeError: a ``target_modules`` entry names a module type that has no DP version.
        ValueError: under ``strict``, tied (shared) trainable parameters, or trainable parameters
            outside DP layers (an unwrapped trainable Embedding, say).

    Example:
        >>> m = make_private(
        ...     nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)),
        ...     FlashDPConfig(max_grad_norm=1.0, noise_multiplier=0.0),
        ... )
        >>> [type(x).__name__ for x in m], len(dp_groups(m))
        (['DPLinear', 'Tanh', 'DPLinear'], 4)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if not isinstance(config, FlashDPConfig):
        raise TypeError(f"config: expected a FlashDPConfig, got {type(config).__name__}")
    names_of: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            names_of.setdefault(id(p), []).append(name)
    tied = [names for names in names_of.values() if len(names) > 1]
    if tied and config.strict:
        raise ValueError(
            f"model: tied trainable parameters {tied} (one tensor clipped twice breaks the "
            "sensitivity bound); untie them (tie_word_embeddings=False) or freeze them"
        )
    skip = set(config.skip)
    chosen: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if not name or any(name == s or name.startswith(s + ".") for s in skip):
            continue
        if _selected(name, module, config.target_modules):
            if not layers.supported(module):
                raise TypeError(
                    f"target_modules: {name!r} is a {type(module).__name__}, which has no DP "
                    "version (supported: Linear, LayerNorm, RMSNorm, LlamaRMSNorm, Embedding, "
                    "transformers Conv1D)"
                )
            chosen.append((name, module))
    # build every DP module and run every check before the model is modified
    replaced = {name: layers.to_dp(module) for name, module in chosen}
    groups = [
        (f"{name}.{pname}", p, new)
        for name, new in replaced.items()
        for pname, p in new.named_parameters(recurse=False)
        if p.requires_grad
    ]
    if config.strict:
        inside = {id(p) for _, p, _ in groups}
        outside = [
            n for n, p in model.named_parameters() if p.requires_grad and id(p) not in inside
        ]
        if outside:
            raise ValueError(
                f"model: trainable parameters outside DP layers would train without privacy: "
                f"{outside[:6]}{' ...' if len(outside) > 6 else ''} (freeze them, or pass "
                "strict=False to train them without clipping)"
            )
    for name, new in replaced.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    k = max(1, len(groups))
    c_k = (
        config.max_grad_norm / math.sqrt(k)
        if config.allocation == "split"
        else config.max_grad_norm
    )
    for new in replaced.values():
        norms = {pname: c_k for pname, p in new.named_parameters(recurse=False) if p.requires_grad}
        new.dp_state = layers._DPState(norms, config)
    model._flashdp_groups = [(name, p, c_k) for name, p, _ in groups]
    model._flashdp_config = config
    return model


def dp_groups(model: nn.Module) -> list[tuple[str, nn.Parameter, float]]:
    """The clipping groups of a model from :func:`make_private`: ``(name, parameter, C_k)``."""
    inner = getattr(model, "module", model)
    groups = getattr(inner, "_flashdp_groups", None)
    if groups is None:
        raise ValueError("model: not made private (call flashdp.make_private(model, config) first)")
    return groups


def per_sample_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """(B,) per-sample token-mean cross entropy; each sample is averaged over its own tokens.

    Unlike the Hugging Face loss (one mean over every token of the batch, which couples samples
    through the token count), sample i's loss depends on sample i only. ``labels`` are aligned
    with ``logits`` (no shift).

    Args:
        logits: (B, T, V).
        labels: (B, T) int64, ``ignore_index`` where no loss is taken.

    Example:
        >>> per_sample_lm_loss(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long)).shape
        torch.Size([2])
    """
    if logits.dim() != 3:
        raise ValueError(f"logits: expected (B, T, V), got shape {tuple(logits.shape)}")
    if labels.shape != logits.shape[:2]:
        raise ValueError(
            f"labels: expected shape {tuple(logits.shape[:2])}, got {tuple(labels.shape)}"
        )
    tok = torch.nn.functional.cross_entropy(
        (logits if logits.dtype == torch.float64 else logits.float()).transpose(1, 2),
        labels,
        ignore_index=ignore_index,
        reduction="none",
    )
    count = (labels != ignore_index).sum(1).clamp(min=1)
    return tok.sum(1) / count


class DPOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer: once per logical batch, sum across ranks, add noise, divide by B̄, step.

    ``ĝ_k = (S_k + 𝒩(0, σ² C_tot² I)) / B̄`` with ``C_tot = √(Σ_k C_k²)`` (as opacus's
    ``DPPerLayerOptimizer``). Gradients of several backward passes accumulate in ``.grad``
    (micro-batches); noise is drawn once, in :meth:`step`.

    Under ``torch.distributed`` the clipped sums are all-reduced (summed) across ranks; the noise
    comes from ``generator`` seeded alike on every rank, or, with no generator, is drawn on rank 0
    and broadcast. A model wrapped in ``DistributedDataParallel`` (whose reducer averages) is
    recognised and re-scaled to the sum. ``expected_batch_size`` is the global B̄.

    Args:
        optimizer: the wrapped optimizer over the model's parameters.
        model: the model returned by :func:`make_private` (or its DDP wrapper).
        config: the same :class:`FlashDPConfig`.
        expected_batch_size: B̄ = q·N_data (> 0).
        generator: the noise generator (None: torch's global RNG).
        accountant: a :class:`PrivacyAccountant` stepped once per step (needs ``sample_rate``).
        sample_rate: the Poisson rate q.

    Example:
        >>> torch.manual_seed(0) and None
        >>> cfg = FlashDPConfig(max_grad_norm=1.0, noise_multiplier=0.0)
        >>> model = make_private(nn.Sequential(nn.Linear(3, 2)), cfg)
        >>> opt = DPOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, cfg, 4)
        >>> model(torch.randn(4, 3)).pow(2).sum(1).mean().backward()
        >>> opt.step()
        >>> opt.steps
        1
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        config: FlashDPConfig,
        expected_batch_size: float,
        generator: torch.Generator | None = None,
        accountant: PrivacyAccountant | None = None,
        sample_rate: float | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer: expected a torch Optimizer, got {type(optimizer).__name__}"
            )
        if not isinstance(config, FlashDPConfig):
            raise TypeError(f"config: expected a FlashDPConfig, got {type(config).__name__}")
        if isinstance(expected_batch_size, bool) or not isinstance(
            expected_batch_size, numbers.Real
        ):
            raise TypeError(
                f"expected_batch_size: expected a number > 0, got {type(expected_batch_size).__name__}"
            )
        if not expected_batch_size > 0:
            raise ValueError(f"expected_batch_size: expected > 0, got {expected_batch_size}")
        if accountant is not None and sample_rate is None:
            raise ValueError("sample_rate: required with an accountant (the Poisson rate q)")
        if sample_rate is not None and not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate: expected 0 < q <= 1, got {sample_rate}")
        self.original_optimizer = optimizer
        self.model = model
        self.config = config
        self.expected_batch_size = float(expected_batch_size)
        self.generator = generator
        self.accountant = accountant
        self.sample_rate = sample_rate
        self.groups = dp_groups(model)
        self.total_norm = math.sqrt(sum(c * c for _, _, c in self.groups))
        self.steps = 0
        self._is_ddp = isinstance(model, nn.parallel.DistributedDataParallel)

    # the Optimizer interface, delegated
    @property
    def param_groups(self):
        return self.original_optimizer.param_groups

    @property
    def state(self):
        return self.original_optimizer.state

    @property
    def defaults(self):
        return self.original_optimizer.defaults

    def state_dict(self):
        return self.original_optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.original_optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.original_optimizer.zero_grad(set_to_none=set_to_none)

    def __repr__(self) -> str:
        return f"DPOptimizer({self.original_optimizer!r}, σ={self.config.noise_multiplier})"

    def _noise_like(self, p: torch.Tensor, std: float) -> torch.Tensor:
        dist = torch.distributed
        if self.generator is not None:
            return torch.normal(
                0.0, std, p.shape, generator=self.generator, dtype=p.dtype, device=p.device
            )
        noise = torch.normal(0.0, std, p.shape, dtype=p.dtype, device=p.device)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.broadcast(noise, src=0)
        return noise

    @torch.no_grad()
    def pre_step(self) -> None:
        """Reduce, noise and scale every group's ``.grad`` (the wrapped optimizer does not step)."""
        dist = torch.distributed
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        std = self.config.noise_multiplier * self.total_norm
        for _, p, _ in self.groups:
            if p.grad is None:  # an empty Poisson batch: S = 0, noise still added
                p.grad = torch.zeros_like(p)
            if world > 1:
                if self._is_ddp:
                    p.grad.mul_(world)  # DDP's reducer averaged the clipped sums
                else:
                    dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            if std > 0:
                p.grad.add_(self._noise_like(p.grad, std))
            if self.config.loss_reduction == "mean":
                p.grad.div_(self.expected_batch_size)

    def step(self, closure=None):
        """Noise once for the logical batch, step the wrapped optimizer and the accountant."""
        if closure is not None:
            with torch.enable_grad():
                closure()
        self.pre_step()
        out = self.original_optimizer.step()
        self.steps += 1
        if self.accountant is not None:
            self.accountant.step(self.config.noise_multiplier, self.sample_rate)
        return out


class PrivacyAccountant:
    """(ε, δ) accounting of the sampled Gaussian mechanism through ``opacus.accountants``.

    Args:
        mechanism: ``"rdp"`` (Rényi DP, opacus's ``RDPAccountant``) or ``"prv"``
            (privacy random variables, ``PRVAccountant``).

    Example:
        >>> acc = PrivacyAccountant("rdp")
        >>> acc.step(1.5, 0.04, steps=2250)
        >>> round(acc.epsilon(1e-5), 4)
        7.3291
    """

    def __init__(self, mechanism: str = "rdp") -> None:
        if mechanism not in ("rdp", "prv"):
            raise ValueError(f"mechanism: expected 'rdp' or 'prv', got {mechanism!r}")
        self.mechanism = mechanism
        self.history: list[tuple[float, float, int]] = []

    def _opacus(self):
        from opacus.accountants import PRVAccountant, RDPAccountant

        acc = RDPAccountant() if self.mechanism == "rdp" else PRVAccountant()
        acc.history = list(self.history)
        return acc

    def step(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Record ``steps`` steps at (σ, q)."""
        if noise_multiplier < 0:
            raise ValueError(f"noise_multiplier: expected >= 0, got {noise_multiplier}")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate: expected 0 < q <= 1, got {sample_rate}")
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            self.history[-1] = (noise_multiplier, sample_rate, self.history[-1][2] + steps)
        else:
            self.history.append((float(noise_multiplier), float(sample_rate), int(steps)))

    def epsilon(self, delta: float, **kwargs) -> float:
        """ε at ``delta`` for the steps so far (inf with σ = 0; 0 before any step)."""
        if not 0 < delta < 1:
            raise ValueError(f"delta: expected 0 < δ < 1, got {delta}")
        if not self.history:
            return 0.0
        if any(nm == 0 for nm, _, _ in self.history):
            return math.inf
        return float(self._opacus().get_epsilon(delta, **kwargs))

    def noise_multiplier_for(
        self, epsilon: float, delta: float, sample_rate: float, steps: int, tolerance: float = 0.01
    ) -> float:
        """The σ that reaches ``epsilon`` at ``delta`` after ``steps`` steps of rate q.

        Example:
            >>> round(PrivacyAccountant("rdp").noise_multiplier_for(8, 1e-5, 0.04, 2000), 4)
            1.3562
        """
        from opacus.accountants.utils import get_noise_multiplier

        if not epsilon > 0:
            raise ValueError(f"epsilon: expected > 0, got {epsilon}")
        return float(
            get_noise_multiplier(
                target_epsilon=epsilon,
                target_delta=delta,
                sample_rate=sample_rate,
                steps=steps,
                accountant=self.mechanism,
                epsilon_tolerance=tolerance,
            )
        )


class PoissonSampler:
    """Poisson sampling: each of ``num_samples`` indices joins a batch with probability q.

    Iterating yields ``steps`` int64 index tensors (possibly empty), reproducible from ``seed``.
    Usable as a ``DataLoader`` ``batch_sampler``.

    Example:
        >>> batches = list(PoissonSampler(100, 0.1, steps=3, seed=0))
        >>> len(batches), batches[0].dtype
        (3, torch.int64)
    """

    def __init__(self, num_samples: int, sample_rate: float, steps: int, seed: int = 0) -> None:
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples: expected an int >= 1, got {num_samples!r}")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate: expected 0 < q <= 1, got {sample_rate}")
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps: expected an int >= 0, got {steps!r}")
        self.num_samples, self.sample_rate, self.steps, self.seed = (
            num_samples,
            sample_rate,
            steps,
            seed,
        )

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.steps):
            mask = torch.rand(self.num_samples, generator=g) < self.sample_rate
            yield mask.nonzero().flatten()
