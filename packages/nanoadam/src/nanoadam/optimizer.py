"""``NanoAdam``: Adam on the k-fraction of smallest-|θ| entries of each tensor, compact state.

State of a sparse parameter (``optimizer.state[p]``):

* ``idx`` — the selected flat indices I, sorted, int32 (``index_dtype="auto"``/``torch.int32``),
  int64, or int16 chunk-local offsets (``torch.int16``, needs ``chunk_size <= 32767``);
* ``exp_avg``, ``exp_avg_sq`` — compact moments, one value per selected entry;
* ``age`` — per-entry step counts (int32) for bias correction.

The step counter and current density live in the param group (``group["step"]``,
``group["current_density"]``), so ``state_dict()`` carries I, ages and the step.

FSDP2 (``fully_shard``): parameters are DTensors sharded ``Shard(0)``; every rank selects and
updates on its local shard (``to_local()``), so I, m, v and ages are local. This equals the
unsharded optimizer exactly when every shard boundary is a chunk boundary (each shard holds a
multiple of ``chunk_size`` entries); otherwise the constructor raises ``ValueError``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable

import torch

CRITERIA = ("small_weight", "large_weight", "random", "large_grad")
MODES = ("remap", "reset", "positional")


def _check_density(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name}: expected a number in (0, 1], got {value!r}")
    return float(value)


def _check_interval(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected None or an int >= 1, got {value!r}")
    return value


def _dtensor_type():
    """``DTensor`` if ``torch.distributed.tensor`` is loaded (else no tensor can be one)."""
    mod = sys.modules.get("torch.distributed.tensor")
    return None if mod is None else mod.DTensor


def _local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (FSDP2 parameter or gradient), else ``t`` itself."""
    dt = _dtensor_type()
    if dt is not None and isinstance(t, dt):
        return t.to_local()
    return t


def _check_sharding(p: torch.Tensor, chunk_size: int | None) -> None:
    """Refuse a DTensor whose local shards would cut a selection chunk (see module docstring)."""
    dt = _dtensor_type()
    if dt is None or not isinstance(p, dt):
        return
    placements = tuple(p.placements)
    if all(pl.is_replicate() for pl in placements):
        return
    if len(placements) != 1 or not (placements[0].is_shard() and placements[0].dim == 0):
        raise ValueError(
            f"params: expected DTensor parameters sharded as (Shard(0),) (FSDP2), got {placements}"
        )
    world = p.device_mesh.size()
    rows = p.shape[0]
    per = -(-rows // world)  # torch.chunk sizes: ceil(rows / world) rows per rank
    if per >= rows:
        return  # one rank holds the whole tensor
    shard = per * (p.numel() // rows)
    if chunk_size is None or shard % chunk_size:
        raise ValueError(
            f"chunk_size: a {tuple(p.shape)} parameter sharded over {world} ranks has "
            f"{shard}-entry shards, not a multiple of chunk_size={chunk_size}; per-shard "
            "selection would differ from the unsharded one (pick a chunk_size dividing it)"
        )


def select_indices(key: torch.Tensor, density: float, chunk_size: int | None) -> torch.Tensor:
    """Sorted int64 flat indices of the ⌈k·ℓ⌉ smallest ``key`` entries per chunk, ties to lowest index.

    A stable sort on a ``[chunks, c]`` view (last chunk padded with +inf) — ``torch.topk`` is
    not stable, and ranks of a data-parallel run must agree on ties.

    >>> select_indices(torch.tensor([3.0, 0.0, 2.0, 0.0, 5.0]), 0.1, None)
    tensor([1])
    """
    flat = key.reshape(-1)
    n = flat.numel()
    c = n if chunk_size is None else min(chunk_size, n)
    rows = -(-n // c)
    pad = rows * c - n
    if pad:
        flat = torch.cat([flat, flat.new_full((pad,), float("inf"))])
    order = torch.sort(flat.view(rows, c), dim=1, stable=True).indices
    k_full = min(c, math.ceil(density * c - 1e-12))
    base = torch.arange(rows, device=key.device).unsqueeze(1) * c
    sel = order[:, :k_full] + base
    last_len = c - pad
    k_last = min(last_len, math.ceil(density * last_len - 1e-12))
    if pad or k_last != k_full:
        head = sel[:-1].reshape(-1)
        tail = order[-1, :k_last] + (rows - 1) * c
        out = torch.cat([head, tail])
    else:
        out = sel.reshape(-1)
    return torch.sort(out).values


class NanoAdam(torch.optim.Optimizer):
    """Sparse Adam on the smallest-magnitude weights (Zhou et al., NeurIPS 2025).

    Args:
        params: parameters or param groups (see :func:`nanoadam.param_groups`); a group with
            ``sparse=False`` runs plain AdamW on whole tensors (heads, norms).
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW`` (decay on selected entries only).
        density: k₀, fraction selected per chunk, in (0, 1].
        final_density, total_steps: linear schedule k(t) = k₀ + (k_end − k₀)·min(t, T)/T.
        mask_interval: refresh I every m steps (``None``: static mask, chosen at step 0).
        density_interval: update k every d steps (default: ``mask_interval`` or 1).
        chunk_size: c (``None``: whole tensor).
        criterion: ``small_weight`` (ours), ``large_weight``, ``random``, ``large_grad``.
        state_on_refresh: ``remap`` (retained entries keep m, v, age), ``reset``, ``positional``.
        state_dtype: moment dtype, promoted with the parameter's (fp64 params keep fp64 state).
        index_dtype: ``"auto"`` (int32), ``torch.int32``, ``torch.int64`` or ``torch.int16``.
        seed: seed of the ``random`` criterion (same on every rank).

    >>> w = torch.nn.Parameter(torch.tensor([0.5, -0.01, 2.0, 0.02]))
    >>> opt = NanoAdam([w], lr=0.1, density=0.5, chunk_size=None)
    >>> w.grad = torch.ones(4)
    >>> opt.step()
    >>> opt.mask(w).tolist()
    [False, True, False, True]
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        density: float = 0.1,
        final_density: float | None = None,
        total_steps: int | None = None,
        mask_interval: int | None = 100,
        density_interval: int | None = None,
        chunk_size: int | None = 4096,
        criterion: str = "small_weight",
        state_on_refresh: str = "remap",
        state_dtype: torch.dtype = torch.float32,
        index_dtype="auto",
        seed: int = 0,
    ):
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr < 0:
            raise ValueError(f"lr: expected a number >= 0, got {lr!r}")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise ValueError(f"betas: expected a pair, got {betas!r}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas: expected values in [0, 1), got {betas!r}")
        if not eps >= 0:
            raise ValueError(f"eps: expected >= 0, got {eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay: expected >= 0, got {weight_decay!r}")
        density = _check_density("density", density)
        if final_density is not None:
            final_density = _check_density("final_density", final_density)
            if total_steps is None:
                raise ValueError(
                    "total_steps: expected an int >= 1 when final_density is set, got None"
                )
        total_steps = _check_interval("total_steps", total_steps)
        mask_interval = _check_interval("mask_interval", mask_interval)
        density_interval = _check_interval("density_interval", density_interval)
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
        ):
            raise ValueError(f"chunk_size: expected None or an int >= 1, got {chunk_size!r}")
        if criterion not in CRITERIA:
            raise ValueError(f"criterion: expected one of {CRITERIA}, got {criterion!r}")
        if state_on_refresh not in MODES:
            raise ValueError(f"state_on_refresh: expected one of {MODES}, got {state_on_refresh!r}")
        if not isinstance(state_dtype, torch.dtype) or not state_dtype.is_floating_point:
            raise TypeError(f"state_dtype: expected a floating torch.dtype, got {state_dtype!r}")
        if index_dtype == "auto":
            index_dtype = torch.int32
        if index_dtype not in (torch.int16, torch.int32, torch.int64):
            raise ValueError(
                f"index_dtype: expected 'auto', torch.int16, torch.int32 or torch.int64, got {index_dtype!r}"
            )
        if index_dtype == torch.int16 and (chunk_size is None or chunk_size > 32767):
            raise ValueError(
                f"chunk_size: int16 indices are chunk-local and need chunk_size <= 32767, got {chunk_size!r}"
            )
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            density=density,
            final_density=final_density,
            total_steps=total_steps,
            mask_interval=mask_interval,
            density_interval=density_interval,
            chunk_size=chunk_size,
            criterion=criterion,
            state_on_refresh=state_on_refresh,
            sparse=True,
            step=0,
            current_density=density,
        )
        self.state_dtype = state_dtype
        self.index_dtype = index_dtype
        self.seed = seed
        self.refresh_log: list[int] = []  # steps at which I was recomputed (for tests / plots)
        super().__init__(params, defaults)
        for group in self.param_groups:
            if not group["sparse"]:
                continue
            for p in group["params"]:
                if p.is_sparse:
                    raise TypeError("params: sparse (torch.sparse) parameters are not supported")
                _check_sharding(p, group["chunk_size"])
                if (
                    group["chunk_size"] is not None
                    and index_dtype == torch.int16
                    and group["chunk_size"] > 32767
                ):
                    raise ValueError(
                        f"chunk_size: int16 indices need <= 32767, got {group['chunk_size']}"
                    )
        self._touched: dict[torch.Tensor, torch.Tensor] = {}

    # ----------------------------------------------------------------- schedule
    def density_at(self, t: int, group: dict | None = None) -> float:
        """k(t) of ``group`` (default: the first sparse group)."""
        group = group or next(g for g in self.param_groups if g["sparse"])
        k0, k1, total = group["density"], group["final_density"], group["total_steps"]
        if k1 is None:
            return k0
        return k0 + (k1 - k0) * min(t, total) / total

    def _density_interval(self, group: dict) -> int:
        return group["density_interval"] or group["mask_interval"] or 1

    # ---------------------------------------------------------------- indices
    def _global_idx(self, state: dict, chunk_size: int | None) -> torch.Tensor:
        idx = state["idx"]
        if idx.dtype == torch.int16:
            return idx.long() + state["chunk_of"].long() * chunk_size
        return idx.long()

    def _store_idx(self, state: dict, idx: torch.Tensor, chunk_size: int | None) -> None:
        if self.index_dtype == torch.int16:
            state["idx"] = (idx % chunk_size).to(torch.int16)
            state["chunk_of"] = (idx // chunk_size).to(torch.int32)
        else:
            state["idx"] = idx.to(self.index_dtype)

    def _key(self, p: torch.Tensor, grad, group: dict, pi: int) -> torch.Tensor:
        """The selection key of ``p`` (local tensors: the caller unwraps DTensors)."""
        crit = group["criterion"]
        if crit == "small_weight":
            return p.detach().abs()
        if crit == "large_weight":
            return -p.detach().abs()
        if crit == "large_grad":
            if grad is None:
                raise ValueError(
                    "criterion: 'large_grad' needs gradients at refresh; got grad=None"
                )
            return -grad.detach().abs()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + group["step"] * 7919 + pi)
        return torch.rand(p.shape, generator=gen, dtype=torch.float32).to(p.device)

    def _refresh_param(self, param: torch.Tensor, group: dict, pi: int, density: float) -> None:
        c = group["chunk_size"]
        state = self.state[param]
        p = _local(param)
        grad = None if param.grad is None else _local(param.grad)
        new = select_indices(self._key(p, grad, group, pi), density, c)
        sdt = torch.promote_types(self.state_dtype, p.dtype)
        if "idx" not in state:
            m = torch.zeros(new.numel(), dtype=sdt, device=p.device)
            v, age = m.clone(), torch.zeros(new.numel(), dtype=torch.int32, device=p.device)
        else:
            old = self._global_idx(state, c)
            mode = group["state_on_refresh"]
            om, ov, oa = state["exp_avg"], state["exp_avg_sq"], state["age"]
            m = torch.zeros(new.numel(), dtype=sdt, device=p.device)
            v, age = m.clone(), torch.zeros(new.numel(), dtype=torch.int32, device=p.device)
            if mode == "remap" or (mode == "reset" and torch.equal(old, new)):
                if old.numel():
                    pos = torch.searchsorted(old, new).clamp_max(old.numel() - 1)
                    hit = old[pos] == new
                    m[hit], v[hit], age[hit] = om[pos[hit]], ov[pos[hit]], oa[pos[hit]]
            elif mode == "positional":
                n = min(old.numel(), new.numel())
                m[:n], v[:n], age[:n] = om[:n], ov[:n], oa[:n]
        self._store_idx(state, new, c)
        state["exp_avg"], state["exp_avg_sq"], state["age"] = m, v, age
        touched = self._touched.get(param)
        if touched is None:
            touched = torch.zeros(p.numel(), dtype=torch.bool, device=p.device)
            self._touched[param] = touched
        touched[new] = True

    @torch.no_grad()
    def refresh_masks(self) -> None:
        """Recompute I of every sparse parameter now (at the current density)."""
        for group in self.param_groups:
            if group["sparse"]:
                for pi, p in enumerate(group["params"]):
                    self._refresh_param(p, group, pi, group["current_density"])
        self.refresh_log.append(self.param_groups[0]["step"])

    # -------------------------------------------------------------------- step
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    raise TypeError("params: sparse gradients are not supported by NanoAdam")
        refreshed = False
        for group in self.param_groups:
            t = group["step"]
            if group["sparse"]:
                changed = False
                if t % self._density_interval(group) == 0:
                    k = self.density_at(t, group)
                    changed = k != group["current_density"]
                    group["current_density"] = k
                m_int = group["mask_interval"]
                due = t == 0 or changed or (m_int is not None and t % m_int == 0)
                live = []
                for pi, p in enumerate(group["params"]):
                    if p.grad is None:
                        continue
                    if due or "idx" not in self.state[p]:
                        self._refresh_param(p, group, pi, group["current_density"])
                        refreshed = True
                    live.append(p)
                self._sparse_update(live, group)
            else:
                for p in group["params"]:
                    if p.grad is not None:
                        self._dense_update(p, group)
            group["step"] = t + 1
        if refreshed:
            self.refresh_log.append(self.param_groups[0]["step"] - 1)
        return loss

    def _sparse_update(self, params: list[torch.Tensor], group: dict) -> None:
        """The compact step of every tensor of ``group`` (one Triton launch on CUDA)."""
        from .ops import sparse_adam_step_multi

        states = [self.state[p] for p in params]
        idxs = [
            st["idx"]
            if st["idx"].dtype != torch.int16
            else self._global_idx(st, group["chunk_size"])
            for st in states
        ]
        b1, b2 = group["betas"]
        sparse_adam_step_multi(
            [_local(p) for p in params],
            [_local(p.grad) for p in params],
            idxs,
            [st["exp_avg"] for st in states],
            [st["exp_avg_sq"] for st in states],
            [st["age"] for st in states],
            lr=group["lr"],
            beta1=b1,
            beta2=b2,
            eps=group["eps"],
            weight_decay=group["weight_decay"],
        )

    def _dense_update(self, param: torch.Tensor, group: dict) -> None:
        state = self.state[param]
        p, grad = _local(param), _local(param.grad)
        if "exp_avg" not in state:
            sdt = torch.promote_types(self.state_dtype, p.dtype)
            state["exp_avg"] = torch.zeros(p.shape, dtype=sdt, device=p.device)
            state["exp_avg_sq"] = torch.zeros(p.shape, dtype=sdt, device=p.device)
            state["dense_step"] = 0
        b1, b2 = group["betas"]
        state["dense_step"] += 1
        t = state["dense_step"]
        g = grad.to(state["exp_avg"].dtype)
        w = p.detach().to(g.dtype)
        w.mul_(1 - group["lr"] * group["weight_decay"])
        state["exp_avg"].lerp_(g, 1 - b1)
        state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - b2**t)).add_(group["eps"])
        w.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - b1**t))
        p.copy_(w)

    # --------------------------------------------------------------- inspection
    def mask(self, p: torch.Tensor) -> torch.Tensor:
        """The current selection of ``p`` as a bool tensor like ``p`` (all True for dense groups).

        For an FSDP2 (DTensor) parameter, the mask of this rank's local shard.
        """
        state = self.state.get(p, {})
        for group in self.param_groups:
            if any(q is p for q in group["params"]):
                local = _local(p)
                if not group["sparse"]:
                    return torch.ones_like(local, dtype=torch.bool)
                out = torch.zeros(local.numel(), dtype=torch.bool, device=p.device)
                if "idx" in state:
                    out[self._global_idx(state, group["chunk_size"])] = True
                return out.view(local.shape)
        raise ValueError("p: not a parameter of this optimizer")

    def state_bytes(self) -> int:
        """Bytes of optimizer state tensors (indices, moments, ages; dense groups included)."""
        total = 0
        for st in self.state.values():
            for v in st.values():
                if torch.is_tensor(v):
                    total += v.numel() * v.element_size()
        return total

    def touched_fraction(self) -> float:
        """Fraction of sparse-group entries that were ever selected."""
        n = sum(_local(p).numel() for g in self.param_groups if g["sparse"] for p in g["params"])
        hit = sum(int(t.sum()) for t in self._touched.values())
        return hit / max(n, 1)

    # --------------------------------------------------------------- state dict
    def load_state_dict(self, state_dict: dict) -> None:
        """Load after checking every group and tensor fits (a mismatch raises ``ValueError``).

        The state is deep-copied: in-place steps never alias the source optimizer's tensors.
        """
        import copy

        state_dict = copy.deepcopy(state_dict)
        groups = state_dict.get("param_groups")
        if groups is None or len(groups) != len(self.param_groups):
            raise ValueError(
                f"state_dict: expected {len(self.param_groups)} param groups, got "
                f"{None if groups is None else len(groups)}"
            )
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            for key in ("sparse", "chunk_size", "criterion", "state_on_refresh"):
                if mine[key] != theirs.get(key):
                    raise ValueError(
                        f"state_dict: param group {i} has {key}={theirs.get(key)!r}, this optimizer {mine[key]!r}"
                    )
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError(
                    f"state_dict: param group {i} has {len(theirs['params'])} params, expected {len(mine['params'])}"
                )
            for p, pid in zip(mine["params"], theirs["params"]):
                st = state_dict["state"].get(pid)
                if st is None:
                    continue
                if mine["sparse"]:
                    if "idx" not in st:
                        raise ValueError(f"state_dict: sparse param {pid} has no 'idx'")
                    n = st["idx"].numel()
                    for key in ("exp_avg", "exp_avg_sq", "age"):
                        if st[key].numel() != n:
                            raise ValueError(
                                f"state_dict: param {pid} {key} has {st[key].numel()} entries, idx {n}"
                            )
                    if st["idx"].dtype != self.index_dtype:
                        raise ValueError(
                            f"state_dict: param {pid} idx dtype {st['idx'].dtype}, expected {self.index_dtype}"
                        )
                    hi = int(st["idx"].max()) if n and st["idx"].dtype != torch.int16 else -1
                    if hi >= _local(p).numel():
                        raise ValueError(
                            f"state_dict: param {pid} index {hi} out of range for {_local(p).numel()} entries"
                        )
                else:
                    if tuple(st["exp_avg"].shape) != tuple(_local(p).shape):
                        raise ValueError(
                            f"state_dict: dense param {pid} state shape {tuple(st['exp_avg'].shape)}, expected {tuple(_local(p).shape)}"
                        )
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            if group["sparse"]:
                for p in group["params"]:
                    st = self.state.get(p, {})
                    if "idx" in st:
                        # the base class casts state tensors to the parameter's dtype: undo it
                        sdt = torch.promote_types(self.state_dtype, p.dtype)
                        st["idx"] = st["idx"].to(self.index_dtype)
                        st["age"] = st["age"].to(torch.int32)
                        st["exp_avg"] = st["exp_avg"].to(sdt)
                        st["exp_avg_sq"] = st["exp_avg_sq"].to(sdt)
                        if "chunk_of" in st:
                            st["chunk_of"] = st["chunk_of"].to(torch.int32)
                        t = torch.zeros(_local(p).numel(), dtype=torch.bool, device=p.device)
                        t[self._global_idx(st, group["chunk_size"])] = True
                        self._touched[p] = t
