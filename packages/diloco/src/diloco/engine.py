"""DiLoCo on ``torch.distributed``: inner optimizer per rank, one outer SGD-Nesterov step every H.

One rank is one replica. Every ``sync_every`` inner steps each rank forms its pseudo-gradient
``Δ_m = θ_global − θ_m``, the ranks average it (``all_reduce(SUM)`` per flat bucket, divided by the
world size: ``ReduceOp.AVG`` is NCCL-only), every rank restores ``θ_global`` into the model, sets
``.grad = Δ`` and steps the outer optimizer (SGD with Nesterov momentum by default). The inner
optimizer's state is never reset. Because every rank applies the same outer step to the same
``θ_global`` with the same averaged ``Δ``, all ranks hold bit-identical parameters after a sync.

Example (one process, no process group: world size 1):

    >>> import torch
    >>> from diloco import DiLoCo, DiLoCoConfig
    >>> model = torch.nn.Linear(4, 2)
    >>> inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
    >>> d = DiLoCo(model, inner, DiLoCoConfig(sync_every=2))
    >>> synced = []
    >>> for _ in range(4):
    ...     model(torch.randn(3, 4)).square().mean().backward()
    ...     inner.step()
    ...     inner.zero_grad()
    ...     synced.append(d.step())
    >>> synced, d.outer_steps, d.inner_steps
    ([False, True, False, True], 2, 4)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "PAPER_OUTER_LR",
    "ByteCounter",
    "DiLoCo",
    "DiLoCoConfig",
    "paper_outer_lr",
    "run_replicas",
    "split_global_batch",
]

#: The best outer learning rate per replica count M for N >= 335M (paper, Fig. 7).
PAPER_OUTER_LR: dict[int, float] = {1: 0.4, 2: 0.6, 4: 0.6, 8: 0.8}


def paper_outer_lr(replicas: int) -> float:
    """Fig. 7's outer learning rate for ``replicas`` (M): 0.4 / 0.6 / 0.6 / 0.8 for M = 1 / 2 / 4 / 8.

    An M between the tabulated ones takes the value of the largest tabulated M below it (M = 3
    gets 0.6, M >= 8 gets 0.8): our choice, the paper only swept M in {1, 2, 4, 8}.

    >>> paper_outer_lr(1), paper_outer_lr(2), paper_outer_lr(8)
    (0.4, 0.6, 0.8)
    """
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise ValueError(f"replicas: expected an int >= 1, got {replicas!r}")
    return PAPER_OUTER_LR[max(m for m in PAPER_OUTER_LR if m <= replicas)]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class DiLoCoConfig:
    """Settings of the outer loop (paper defaults).

    Attributes:
        sync_every: H, inner steps between outer steps (paper: 30).
        outer_lr: η; None takes :func:`paper_outer_lr` of the world size (Fig. 7).
        outer_momentum: μ of the outer SGD, in [0, 1) (paper: 0.9).
        nesterov: Nesterov momentum for the outer SGD (paper: True).
        final_sync: :meth:`DiLoCo.finish` runs one more outer step when T is not a multiple of H.
            Off by default, as in the paper (Algorithm 1 evaluates the last global model θ(t) and
            drops the trailing T mod H inner steps), torchft and OpenDiLoCo: the extra outer step
            carries the full Nesterov momentum of the earlier rounds on top of a short Δ, and it
            raised the validation loss in our quick run (see the README). Prefer T a multiple of H.
        backup_device: where θ_global lives between syncs (``"cpu"`` saves accelerator memory).
        bucket_mb: size of the flat buffers Δ is all-reduced in (one collective per bucket).
    """

    sync_every: int = 30
    outer_lr: float | None = None
    outer_momentum: float = 0.9
    nesterov: bool = True
    final_sync: bool = False
    backup_device: str | torch.device = "cpu"
    bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        if not _is_int(self.sync_every) or self.sync_every < 1:
            raise ValueError(f"sync_every: expected an int >= 1, got {self.sync_every!r}")
        if self.outer_lr is not None and not (
            isinstance(self.outer_lr, (int, float))
            and not isinstance(self.outer_lr, bool)
            and math.isfinite(self.outer_lr)
            and self.outer_lr > 0
        ):
            raise ValueError(
                f"outer_lr: expected a finite number > 0 or None, got {self.outer_lr!r}"
            )
        if not (
            isinstance(self.outer_momentum, (int, float))
            and not isinstance(self.outer_momentum, bool)
            and 0.0 <= self.outer_momentum < 1.0
        ):
            raise ValueError(
                f"outer_momentum: expected a number in [0, 1), got {self.outer_momentum!r}"
            )
        if not isinstance(self.nesterov, bool):
            raise TypeError(f"nesterov: expected a bool, got {type(self.nesterov).__name__}")
        if not isinstance(self.final_sync, bool):
            raise TypeError(f"final_sync: expected a bool, got {type(self.final_sync).__name__}")
        if not (isinstance(self.bucket_mb, (int, float)) and self.bucket_mb > 0):
            raise ValueError(f"bucket_mb: expected a number > 0, got {self.bucket_mb!r}")
        try:
            torch.device(self.backup_device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"backup_device: {self.backup_device!r} is not a device") from exc


@dataclasses.dataclass
class ByteCounter:
    """Counts what was all-reduced: bytes and collective calls (one per bucket)."""

    bytes: int = 0
    calls: int = 0

    def add(self, tensor: torch.Tensor) -> None:
        self.bytes += tensor.numel() * tensor.element_size()
        self.calls += 1

    def register_ddp(self, ddp_model: nn.Module) -> None:
        """Count what a ``DistributedDataParallel`` model all-reduces (its default averaging kept).

        Installs a communication hook that counts each gradient bucket, then averages it exactly
        like DDP's default hook (``allreduce_hook``: SUM, divided by the world size).
        """
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def hook(state, bucket):  # unannotated: DDP checks annotations, strings here
            self.add(bucket.buffer())
            return allreduce_hook(state, bucket)

        ddp_model.register_comm_hook(None, hook)


def _world(process_group: Any) -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(process_group), dist.get_world_size(process_group)
    if process_group is not None:
        raise ValueError("process_group: given, but torch.distributed is not initialised")
    return 0, 1


def _buckets(tensors: Sequence[torch.Tensor], bucket_bytes: int) -> list[list[int]]:
    """Indices of ``tensors`` grouped into consecutive buckets of one dtype/device, <= bucket_bytes."""
    out: list[list[int]] = []
    size, key = 0, None
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        k = (t.dtype, t.device)
        if out and k == key and size + nbytes <= bucket_bytes:
            out[-1].append(i)
            size += nbytes
        else:
            out.append([i])
            size, key = nbytes, k
    return out


class DiLoCo:
    """The outer loop of DiLoCo around a model and its inner optimizer, one replica per rank.

    Call :meth:`step` after every ``inner_optimizer.step()`` (or :meth:`attach` it as a post-step
    hook, torchft style); it returns True when an outer step ran. :meth:`finish` runs the
    ``final_sync`` at the end of training. Use :meth:`global_model` to evaluate θ_global.

    Args:
        model: the replica; every rank must start from the same parameters (checked).
        inner_optimizer: the optimizer stepping ``model`` every inner step (AdamW in the paper);
            its state is never reset.
        config: a :class:`DiLoCoConfig` (default: the paper's settings).
        process_group: the replicas' group (default: the world; none initialised: one replica).
        outer_optimizer: an optimizer over ``model``'s trainable parameters (as in torchft: the
            outer step runs on the model's parameters after θ_global is restored into them), or a
            factory ``params -> Optimizer``; default ``SGD(lr=η, momentum=μ, nesterov=...)``.

    Attributes:
        inner_steps, outer_steps: counters (checkpointed).
        counter: a :class:`ByteCounter` of the bytes this rank all-reduced.
    """

    def __init__(
        self,
        model: nn.Module,
        inner_optimizer: torch.optim.Optimizer,
        config: DiLoCoConfig | None = None,
        process_group: Any = None,
        outer_optimizer: torch.optim.Optimizer
        | Callable[[list[nn.Parameter]], torch.optim.Optimizer]
        | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
        if not isinstance(inner_optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"inner_optimizer: expected a torch.optim.Optimizer, got {type(inner_optimizer).__name__}"
            )
        config = DiLoCoConfig() if config is None else config
        if not isinstance(config, DiLoCoConfig):
            raise TypeError(f"config: expected a DiLoCoConfig, got {type(config).__name__}")
        self.model = model
        self.inner_optimizer = inner_optimizer
        self.config = config
        self.process_group = process_group
        self.rank, self.world_size = _world(process_group)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("model: no parameter requires grad, so there is nothing to train")
        inner_ids = {id(p) for g in inner_optimizer.param_groups for p in g["params"]}
        if not inner_ids <= {id(p) for p in self.params}:
            raise ValueError(
                "inner_optimizer: optimizes tensors that are not trainable parameters of model"
            )
        self._check_same_parameters()
        self.outer_lr = (
            config.outer_lr if config.outer_lr is not None else paper_outer_lr(self.world_size)
        )
        if outer_optimizer is None:
            outer_optimizer = torch.optim.SGD(
                self.params,
                lr=self.outer_lr,
                momentum=config.outer_momentum,
                nesterov=config.nesterov and config.outer_momentum > 0,
            )
        elif not isinstance(outer_optimizer, torch.optim.Optimizer):
            if not callable(outer_optimizer):
                raise TypeError(
                    "outer_optimizer: expected a torch.optim.Optimizer, a factory params -> Optimizer "
                    f"or None, got {type(outer_optimizer).__name__}"
                )
            outer_optimizer = outer_optimizer(self.params)
            if not isinstance(outer_optimizer, torch.optim.Optimizer):
                raise TypeError(
                    "outer_optimizer: the factory did not return a torch.optim.Optimizer"
                )
        outer_ids = [id(p) for g in outer_optimizer.param_groups for p in g["params"]]
        if sorted(outer_ids) != sorted(id(p) for p in self.params):
            raise ValueError("outer_optimizer: must optimize exactly model's trainable parameters")
        self.outer_optimizer = outer_optimizer
        device = torch.device(config.backup_device)
        pin = device.type == "cpu" and torch.cuda.is_available() and self.params[0].is_cuda
        # θ_global, the parameters at the last sync (identical on every rank).
        self.backup = [
            (
                p.detach().to(device, copy=True).pin_memory()
                if pin
                else p.detach().to(device, copy=True)
            )
            for p in self.params
        ]
        self.inner_steps = 0
        self.outer_steps = 0
        self._synced_at = 0  # inner step of the last outer step
        self.counter = ByteCounter()
        self._hook = None

    # -- checks --------------------------------------------------------------------------------

    @torch.no_grad()
    def _check_same_parameters(self) -> None:
        if self.world_size == 1:
            return
        flat = torch.cat([p.detach().reshape(-1).double() for p in self.params])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=self.process_group)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=self.process_group)
        if not torch.equal(lo, hi):
            raise ValueError(
                "model: parameters differ across ranks; every replica must start from the same "
                "θ(0) (seed the initialisation, or broadcast from rank 0 first)"
            )

    # -- the loop ------------------------------------------------------------------------------

    def step(self) -> bool:
        """Count one inner step; run the outer step when ``inner_steps % sync_every == 0``."""
        self.inner_steps += 1
        if self.inner_steps % self.config.sync_every == 0:
            self.sync()
            return True
        return False

    def finish(self) -> bool:
        """End of training: with ``final_sync``, one more outer step if inner steps are pending.

        Without ``final_sync`` the model is reset to θ_global (what the paper evaluates).
        Returns True when an outer step ran.
        """
        if self.inner_steps == self._synced_at:
            return False
        if self.config.final_sync:
            self.sync()
            return True
        self._restore()
        self._synced_at = self.inner_steps
        return False

    @torch.no_grad()
    def _restore(self) -> None:
        for p, g in zip(self.params, self.backup, strict=True):
            p.copy_(g, non_blocking=False)

    @torch.no_grad()
    def sync(self) -> None:
        """One outer step now: average Δ = θ_global − θ_m over ranks, restore θ_global, step."""
        deltas = [
            g.to(p.device, non_blocking=False) - p
            for p, g in zip(self.params, self.backup, strict=True)
        ]
        if self.world_size > 1:
            bucket_bytes = int(self.config.bucket_mb * 2**20)
            for idx in _buckets(deltas, bucket_bytes):
                flat = torch.cat([deltas[i].reshape(-1) for i in idx])
                self.counter.add(flat)
                dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.process_group)
                flat.div_(self.world_size)
                offset = 0
                for i in idx:
                    n = deltas[i].numel()
                    deltas[i].copy_(flat[offset : offset + n].view_as(deltas[i]))
                    offset += n
        # The outer step updates θ(t−H), not the replica: restore first, then set .grad and step.
        self._restore()
        for p, d in zip(self.params, deltas, strict=True):
            p.grad = d
        self.outer_optimizer.step()
        self.outer_optimizer.zero_grad(set_to_none=True)
        for p, g in zip(self.params, self.backup, strict=True):
            g.copy_(p, non_blocking=False)
        self.outer_steps += 1
        self._synced_at = self.inner_steps

    @contextlib.contextmanager
    def global_model(self) -> Iterator[nn.Module]:
        """Temporarily load θ_global into the model (to evaluate it); the replica comes back after."""
        with torch.no_grad():
            local = [p.detach().clone() for p in self.params]
            self._restore()
        try:
            yield self.model
        finally:
            with torch.no_grad():
                for p, v in zip(self.params, local, strict=True):
                    p.copy_(v)

    # -- hooks ---------------------------------------------------------------------------------

    def attach(self) -> DiLoCo:
        """Run :meth:`step` as a post-step hook of the inner optimizer (torchft style)."""
        if self._hook is None:
            self._hook = self.inner_optimizer.register_step_post_hook(lambda *_: self.step())
        return self

    def detach(self) -> None:
        """Remove the hook :meth:`attach` installed."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def __enter__(self) -> DiLoCo:
        return self.attach()

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """θ_global, the outer optimizer's state and the counters (the same on every rank).

        Checkpoint the model (the replica) and the inner optimizer beside it. To resume, build
        :class:`DiLoCo` on a model that is the same on every rank (θ(0), say: the constructor
        checks it), then load the replica's ``state_dict``, the inner optimizer's and this one.
        """
        return {
            "global": [g.detach().clone().cpu() for g in self.backup],
            "outer_optimizer": self.outer_optimizer.state_dict(),
            "inner_steps": self.inner_steps,
            "outer_steps": self.outer_steps,
            "synced_at": self._synced_at,
            "sync_every": self.config.sync_every,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load :meth:`state_dict`; refused (ValueError) when it does not fit this model."""
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict, got {type(state).__name__}")
        keys = {
            "global",
            "outer_optimizer",
            "inner_steps",
            "outer_steps",
            "synced_at",
            "sync_every",
        }
        missing = keys - set(state)
        if missing:
            raise ValueError(f"state: missing keys {sorted(missing)}")
        saved = state["global"]
        if len(saved) != len(self.backup):
            raise ValueError(
                f"state: holds {len(saved)} tensors, the model has {len(self.backup)} trainable parameters"
            )
        for i, (s, g) in enumerate(zip(saved, self.backup, strict=True)):
            if s.shape != g.shape or s.dtype != g.dtype:
                raise ValueError(
                    f"state: tensor {i} is {tuple(s.shape)} {s.dtype}, the model's is {tuple(g.shape)} {g.dtype}"
                )
        if state["sync_every"] != self.config.sync_every:
            raise ValueError(
                f"state: saved with sync_every={state['sync_every']}, this DiLoCo has {self.config.sync_every}"
            )
        self.outer_optimizer.load_state_dict(state["outer_optimizer"])
        with torch.no_grad():
            for s, g in zip(saved, self.backup, strict=True):
                g.copy_(s)
        self.inner_steps = int(state["inner_steps"])
        self.outer_steps = int(state["outer_steps"])
        self._synced_at = int(state["synced_at"])


def split_global_batch(batch: Any, rank: int, world: int) -> Any:
    """The contiguous slice of a global batch (dim 0) that replica ``rank`` of ``world`` trains on.

    ``batch`` is a tensor or a tuple/list of tensors with the same first dimension B; B must be a
    multiple of ``world`` (the paper gives each replica B/M sequences).

    >>> import torch
    >>> split_global_batch(torch.arange(6), rank=1, world=3)
    tensor([2, 3])
    """
    if not _is_int(world) or world < 1:
        raise ValueError(f"world: expected an int >= 1, got {world!r}")
    if not _is_int(rank) or not 0 <= rank < world:
        raise ValueError(f"rank: expected an int in [0, {world}), got {rank!r}")
    tensors = list(batch) if isinstance(batch, (tuple, list)) else [batch]
    if not tensors or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in tensors):
        raise TypeError(
            "batch: expected a tensor or a tuple/list of tensors with a batch dimension"
        )
    size = tensors[0].shape[0]
    if any(t.shape[0] != size for t in tensors):
        raise ValueError(f"batch: first dimensions differ: {[t.shape[0] for t in tensors]}")
    if size % world:
        raise ValueError(f"batch: global batch {size} is not divisible by world={world}")
    local = size // world
    out = [t[rank * local : (rank + 1) * local] for t in tensors]
    if isinstance(batch, torch.Tensor):
        return out[0]
    return type(batch)(out)


def run_replicas(
    fn: Callable[..., Any],
    world_size: int,
    backend: str = "gloo",
    args: tuple = (),
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes, one replica each.

    A thin layer over :func:`neurips25_core.distributed.run_distributed` (file-store rendezvous in a
    private folder, one intra-op thread per rank, every rank's traceback on failure); returns the
    per-rank results in rank order.
    """
    from neurips25_core.distributed import run_distributed

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: expected 'gloo' or 'nccl', got {backend!r}")
    return run_distributed(
        fn, world_size=world_size, args=args, backend=backend, start_method=start_method
    )
