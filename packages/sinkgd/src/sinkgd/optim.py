"""Optimizers: SinkGD, SWAN, and their hybrids with AdamW for non-matrix parameters.

* :class:`SinkGD`: ``W ← W (1 − ηλ) − η · SR-Sinkhorn(∇W, L)`` on 2-D parameters; no state at all.
* :class:`SWAN`: ``W ← W (1 − ηλ) − η · GradWhitening(GradNorm(∇W))``; no state either.
* :func:`param_groups`: the paper's routing: embeddings, norms, biases and the output head (by
  module type), every parameter that is not a matrix and names matching ``embed|lm_head|norm|bias``
  go to AdamW, every other matrix to the matrix optimizer.
* :class:`SinkGDWithAdam`, :class:`SWANWithAdam`: one ``torch.optim.Optimizer`` over both kinds of
  group (like KellerJordan/Muon's ``MuonWithAuxAdam``), so LR schedulers, ``state_dict`` and
  checkpointing see a single optimizer.

Torch conventions followed: param groups with per-group options, ``step(closure)``, parameters
without a gradient are skipped, ``state_dict``/``load_state_dict`` round trip (SinkGD's state is
empty), bf16/fp16 parameters are updated through fp32, sparse gradients and non-matrix parameters
raise with the parameter named. DTensor (FSDP2) parameters are normalised with all-reduced
row/column sums (:mod:`sinkgd.distributed`).
"""

from __future__ import annotations

import math
import numbers
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from .distributed import is_dtensor, sr_sinkhorn_dtensor
from .ops import BACKENDS, check_eps, check_num_iters
from .sinkhorn import accumulation_dtype, sr_sinkhorn_torch
from .swan import swan_direction_torch

__all__ = [
    "ADAM_NAME_PATTERN",
    "CPU_FOREACH_ELEMENTS",
    "SWAN",
    "SWANWithAdam",
    "SinkGD",
    "SinkGDWithAdam",
    "optimizer_state_bytes",
    "param_groups",
]

ADAM_NAME_PATTERN = r"embed|lm_head|norm|bias"

#: On CPU, ``foreach`` stacks same-shape matrices into batches of at most this many values
#: (1 MiB of fp32: the batch stays in cache). Measured on a 2-core EPYC, one thread: stacking
#: sixteen 128×128 gradients halves the normalisation time, stacking 512×512 ones makes it slower.
CPU_FOREACH_ELEMENTS = 2**18
_LOW_PRECISION = (torch.bfloat16, torch.float16)


# ----------------------------------------------------------------------------- checks


def _check_lr(lr: object, name: str = "lr") -> float | torch.Tensor:
    if isinstance(lr, torch.Tensor):
        if lr.numel() != 1:
            raise ValueError(
                f"{name}: expected a float or a one-element tensor, got shape {tuple(lr.shape)}"
            )
        if float(lr) < 0:
            raise ValueError(f"{name}: expected >= 0, got {float(lr)}")
        return lr
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"{name}: expected a float >= 0, got {type(lr).__name__} {lr!r}")
    if not (0 <= lr < math.inf):
        raise ValueError(f"{name}: expected a finite float >= 0, got {lr}")
    return float(lr)


def _check_nonneg(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a float >= 0, got {type(value).__name__} {value!r}")
    if not (0 <= value < math.inf):
        raise ValueError(f"{name}: expected a finite float >= 0, got {value}")
    return float(value)


def _check_betas(betas: object) -> tuple[float, float]:
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise TypeError(f"betas: expected a pair of floats in [0, 1), got {betas!r}")
    for i, b in enumerate(betas):
        if isinstance(b, bool) or not isinstance(b, numbers.Real) or not 0 <= b < 1:
            raise ValueError(f"betas: expected betas[{i}] in [0, 1), got {b!r}")
    return float(betas[0]), float(betas[1])


def _check_backend(backend: object) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    return str(backend)


def _param_label(group: dict[str, Any], index: int) -> str:
    names = group.get("param_names")
    return repr(names[index]) if names and index < len(names) else f"#{index} of its group"


def _check_matrices(group: dict[str, Any], who: str) -> None:
    for i, p in enumerate(group["params"]):
        if p.ndim != 2:
            raise ValueError(
                f"params: {who} updates 2-D matrices only, parameter {_param_label(group, i)} has "
                f"shape {tuple(p.shape)}; route it to AdamW (sinkgd.param_groups does this)"
            )
        if not p.is_floating_point():
            raise TypeError(
                f"params: {who} needs floating-point parameters, parameter {_param_label(group, i)} "
                f"has dtype {p.dtype}"
            )


def _grads_with_params(group: dict[str, Any], who: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = []
    for i, p in enumerate(group["params"]):
        if p.grad is None:
            continue
        if p.grad.is_sparse or p.grad.layout != torch.strided:
            raise TypeError(
                f"params: {who} does not support sparse gradients; parameter {_param_label(group, i)} "
                f"has a gradient with layout {p.grad.layout}"
            )
        pairs.append((p, p.grad))
    return pairs


# ----------------------------------------------------------------------------- the update


def _normalize(
    grad: torch.Tensor, num_iters: int, eps: float, backend: str, out_dtype: torch.dtype
) -> torch.Tensor:
    """SR-Sinkhorn of a ``(..., m, n)`` local gradient in ``out_dtype`` (no checks)."""
    use_triton = backend == "triton" or (
        backend == "auto"
        and grad.is_cuda
        and grad.dtype in (torch.float32, torch.bfloat16, torch.float16)
    )
    if use_triton:
        from neurips25_core.device import triton_available

        if triton_available():
            from .kernels.sinkhorn import sr_sinkhorn_triton

            return sr_sinkhorn_triton(grad, num_iters, eps, out_dtype=out_dtype)
        if backend == "triton":
            raise ValueError("backend: 'triton' requested but triton is not installed")
    if backend == "reference":
        from . import reference

        if grad.numel() == 0:
            return grad.to(out_dtype, copy=True)
        flat = grad.reshape(-1, *grad.shape[-2:]).to(torch.float64)
        out = torch.stack([reference.sr_sinkhorn(x, num_iters, eps) for x in flat])
        return out.reshape(grad.shape).to(out_dtype)
    return sr_sinkhorn_torch(grad, num_iters, eps, out_dtype=out_dtype)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if is_dtensor(t) else t


def _apply_update(
    param: torch.Tensor, update: torch.Tensor, lr: float | torch.Tensor, weight_decay: float
) -> None:
    """``param ← param (1 − lr·λ) − lr · update`` in place; low-precision params go through fp32.

    ``param`` may be a DTensor (``update`` is then its local shard); ``lr`` a float or a tensor.
    """
    target = _local(param)
    work = target.float() if target.dtype in _LOW_PRECISION else target
    if weight_decay != 0:
        work.mul_(1 - lr * weight_decay)
    if isinstance(lr, torch.Tensor):
        work.sub_(update.to(work.dtype) * lr.to(work.device, work.dtype))
    else:
        work.add_(update.to(work.dtype), alpha=-lr)
    if work is not target:
        target.copy_(work)


def sinkgd_update_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    lr: float | torch.Tensor,
    num_iters: int = 5,
    weight_decay: float = 0.0,
    eps: float = 1e-8,
    foreach: bool = False,
    backend: str = "auto",
) -> None:
    """Functional SinkGD step over lists of matrices (used by :class:`SinkGD`; ``torch.compile``-able).

    Args:
        params: 2-D parameters, updated in place.
        grads: their gradients (same shapes).
        lr: step size η (a float, or a one-element tensor to avoid recompiling when it changes).
        num_iters: L.
        weight_decay: decoupled weight decay λ.
        eps: lower clamp of the norms.
        foreach: stack same-shape, same-dtype matrices into one ``(B, m, n)`` batch (on CPU in
            batches of at most :data:`CPU_FOREACH_ELEMENTS` values; larger matrices one by one).
        backend: ``"auto"``, ``"torch"``, ``"triton"`` or ``"reference"`` for the normalisation.
    """
    if foreach:
        buckets: dict[tuple, list[int]] = defaultdict(list)
        rest = []
        for i, (p, g) in enumerate(zip(params, grads)):
            if is_dtensor(p) or is_dtensor(g):
                rest.append(i)
            else:
                buckets[(tuple(g.shape), g.dtype, g.device)].append(i)
        for (shape, _, device), idx in buckets.items():
            # On CUDA one batch per shape amortises the launches. On CPU a large stacked batch
            # falls out of cache and goes through the slower batched matmul, so the batch is
            # capped at CPU_FOREACH_ELEMENTS values; a matrix of that size or more is not stacked.
            size = CPU_FOREACH_ELEMENTS // max(1, shape[0] * shape[1])
            chunk = len(idx) if device.type == "cuda" else max(1, size)
            for start in range(0, len(idx), chunk):
                part = idx[start : start + chunk]
                if len(part) == 1:
                    rest.append(part[0])
                    continue
                stacked = torch.stack([grads[i] for i in part])
                updates = _normalize(
                    stacked, num_iters, eps, backend, accumulation_dtype(stacked.dtype)
                )
                for j, i in enumerate(part):
                    _apply_update(params[i], updates[j], lr, weight_decay)
        pairs = [(params[i], grads[i]) for i in sorted(rest)]
    else:
        pairs = list(zip(params, grads))
    for p, g in pairs:
        if is_dtensor(g):
            if not is_dtensor(p) or p.placements != g.placements:
                raise ValueError(
                    f"params: a DTensor gradient with placements {g.placements} needs a DTensor "
                    f"parameter with the same placements, got {getattr(p, 'placements', 'a plain tensor')}"
                )
            update = sr_sinkhorn_dtensor(g, num_iters, eps, out_dtype=accumulation_dtype(g.dtype))
        else:
            update = _normalize(g, num_iters, eps, backend, accumulation_dtype(g.dtype))
        _apply_update(p, update, lr, weight_decay)


def swan_update_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    lr: float | torch.Tensor,
    ns_steps: int = 10,
    weight_decay: float = 0.0,
    eps: float = 1e-8,
    rescale: bool = True,
) -> None:
    """Functional SWAN step over lists of matrices (used by :class:`SWAN`)."""
    for p, g in zip(params, grads):
        if is_dtensor(g):
            raise ValueError(
                "params: SWAN does not support DTensor (sharded) parameters; use SinkGD"
            )
        _apply_update(p, swan_direction_torch(g, ns_steps, eps, rescale), lr, weight_decay)


# ----------------------------------------------------------------------------- AdamW (for the hybrids)


def _adamw_update_(group: dict[str, Any], state: dict[torch.Tensor, dict[str, Any]]) -> None:
    """Decoupled-weight-decay Adam (``torch.optim.AdamW``'s math) over one group, fp32 moments."""
    beta1, beta2 = group["betas"]
    lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
    for i, p in enumerate(group["params"]):
        if p.grad is None:
            continue
        if p.grad.is_sparse or p.grad.layout != torch.strided:
            raise TypeError(
                f"params: AdamW here does not support sparse gradients; parameter "
                f"{_param_label(group, i)} has a gradient with layout {p.grad.layout}"
            )
        st = state[p]
        moment_dtype = torch.float32 if p.dtype in _LOW_PRECISION else p.dtype
        if len(st) == 0:
            st["step"] = torch.tensor(0.0, dtype=torch.float32)
            st["exp_avg"] = torch.zeros_like(
                p, dtype=moment_dtype, memory_format=torch.preserve_format
            )
            st["exp_avg_sq"] = torch.zeros_like(
                p, dtype=moment_dtype, memory_format=torch.preserve_format
            )
        st["step"] += 1
        step = float(st["step"])
        target = _local(p)
        grad = _local(p.grad).to(moment_dtype)
        exp_avg, exp_avg_sq = _local(st["exp_avg"]), _local(st["exp_avg_sq"])
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias1 = 1 - beta1**step
        bias2_sqrt = math.sqrt(1 - beta2**step)
        work = target.float() if target.dtype in _LOW_PRECISION else target
        if wd != 0:
            work.mul_(1 - lr * wd)
        denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(eps)
        work.addcdiv_(exp_avg, denom, value=-lr / bias1)
        if work is not target:
            target.copy_(work)


# ----------------------------------------------------------------------------- SinkGD


class SinkGD(Optimizer):
    """SinkGD (paper Alg. 4): a stateless optimizer for weight matrices.

    ``W ← W (1 − ηλ) − η · SR-Sinkhorn(∇W, L)``: every step the gradient's rows are rescaled to ℓ2
    norm √n and its columns to √m, alternately, ``num_iters`` times (the update has entry RMS one,
    like Adam's), then the weight steps along it. No momentum and no per-parameter state: the
    optimizer's memory is SGD's.

    Args:
        params: 2-D parameters or param groups (dicts with ``params`` and optional overrides of
            the options below; ``(name, param)`` pairs give error messages with names).
        lr: step size η (the paper's setting is ≈1e-3: 0.05 × a global 0.02).
        num_iters: L, Sinkhorn iterations (5; L=1 is cheaper with a small loss).
        weight_decay: decoupled weight decay λ (the paper uses 0).
        eps: lower clamp of the row/column norms (zero rows and columns stay zero).
        foreach: stack same-shape matrices into one batched normalisation (on CPU in batches of
            at most :data:`CPU_FOREACH_ELEMENTS` values, larger matrices one by one). ``None``
            (default) and ``True`` both batch; ``False`` normalises each matrix on its own.
        backend: normalisation backend, ``"auto"`` (Triton on CUDA, torch on CPU), ``"torch"``,
            ``"triton"`` or ``"reference"``.

    Raises:
        ValueError: a parameter is not 2-D (route it to AdamW, see :func:`param_groups`), or an
            option is out of range.
        TypeError: at ``step()``, a gradient is sparse.

    Example:
        >>> import torch, sinkgd
        >>> w = torch.nn.Parameter(torch.randn(8, 16))
        >>> opt = sinkgd.SinkGD([w], lr=1e-3)
        >>> (w.sum() ** 2).backward()
        >>> opt.step()
        >>> opt.state[w]
        {}
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float | torch.Tensor = 1e-3,
        num_iters: int = 5,
        weight_decay: float = 0.0,
        eps: float = 1e-8,
        foreach: bool | None = None,
        backend: str = "auto",
    ) -> None:
        defaults = {
            "lr": _check_lr(lr),
            "num_iters": check_num_iters(num_iters),
            "weight_decay": _check_nonneg(weight_decay, "weight_decay"),
            "eps": check_eps(eps),
            "foreach": foreach,
            "backend": _check_backend(backend),
        }
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (checked like the constructor's arguments; every parameter must be 2-D)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            _check_group_options(group)
            _check_matrices(group, type(self).__name__)
        except (TypeError, ValueError):
            self.param_groups.pop()  # lose nothing: the optimizer is as before the call
            raise

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SinkGD step on every parameter that has a gradient.

        Args:
            closure: re-evaluates the model and returns the loss (optional).

        Returns:
            The closure's loss, or ``None``.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            pairs = _grads_with_params(group, type(self).__name__)
            if not pairs:
                continue
            foreach = group["foreach"]
            if foreach is None:
                foreach = True  # batched on every device (capped batches on CPU)
            sinkgd_update_(
                [p for p, _ in pairs],
                [g for _, g in pairs],
                group["lr"],
                group["num_iters"],
                group["weight_decay"],
                group["eps"],
                foreach=foreach,
                backend=group["backend"],
            )
        return loss


def _check_group_options(group: dict[str, Any]) -> None:
    if "lr" in group:
        _check_lr(group["lr"])
    if "num_iters" in group:
        check_num_iters(group["num_iters"])
    if "ns_steps" in group:
        check_num_iters(group["ns_steps"], "ns_steps")
    if "weight_decay" in group:
        _check_nonneg(group["weight_decay"], "weight_decay")
    if "eps" in group:
        check_eps(group["eps"])
    if "backend" in group:
        _check_backend(group["backend"])
    if "betas" in group:
        _check_betas(group["betas"])


# ----------------------------------------------------------------------------- SWAN


class SWAN(Optimizer):
    """SWAN (Ma et al. 2024): stateless GradNorm + GradWhitening on weight matrices.

    ``W ← W (1 − ηλ) − η · c · NS((G̃ G̃ᵀ)^{-1/2} G̃)`` with ``G̃`` the row-standardised gradient and
    the whitening by Newton–Schulz; ``c = ‖G̃‖_F / ‖ΔW‖_F`` when ``rescale`` (entry RMS one).
    Cost O(m²n) per matrix (matmuls) against SinkGD's O(L·m·n) elementwise.

    Args:
        params: 2-D parameters or param groups.
        lr: step size η.
        ns_steps: Newton–Schulz iterations.
        weight_decay: decoupled weight decay λ.
        eps: lower clamp of the row standard deviation.
        rescale: give the direction the Frobenius norm of the standardised gradient.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        ns_steps: int = 10,
        weight_decay: float = 0.0,
        eps: float = 1e-8,
        rescale: bool = True,
    ) -> None:
        defaults = {
            "lr": _check_lr(lr),
            "ns_steps": check_num_iters(ns_steps, "ns_steps"),
            "weight_decay": _check_nonneg(weight_decay, "weight_decay"),
            "eps": check_eps(eps),
            "rescale": bool(rescale),
        }
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (every parameter must be 2-D)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            _check_group_options(group)
            _check_matrices(group, type(self).__name__)
        except (TypeError, ValueError):
            self.param_groups.pop()
            raise

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SWAN step on every parameter that has a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            pairs = _grads_with_params(group, type(self).__name__)
            swan_update_(
                [p for p, _ in pairs],
                [g for _, g in pairs],
                group["lr"],
                group["ns_steps"],
                group["weight_decay"],
                group["eps"],
                group["rescale"],
            )
        return loss


# ----------------------------------------------------------------------------- routing and hybrids


def _is_norm_module(module: nn.Module) -> bool:
    """Normalisation layers: torch's (LayerNorm, RMSNorm, GroupNorm, BatchNorm/InstanceNorm) and any
    class whose name ends in ``Norm`` (``LlamaRMSNorm``, ``T5LayerNorm``, ...)."""
    torch_norms = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)
    if hasattr(nn, "RMSNorm"):
        torch_norms = (*torch_norms, nn.RMSNorm)
    return isinstance(module, torch_norms) or type(module).__name__.lower().endswith("norm")


def _output_head(model: nn.Module) -> nn.Module | None:
    """The model's output projection when it names one (transformers' ``get_output_embeddings``)."""
    getter = getattr(model, "get_output_embeddings", None)
    if not callable(getter):
        return None
    try:
        head = getter()
    except (NotImplementedError, AttributeError, TypeError):
        return None
    return head if isinstance(head, nn.Module) else None


def _adam_reasons(model: nn.Module, pattern: re.Pattern[str] | None) -> dict[int, str]:
    """``id(param) -> why it goes to AdamW`` for every parameter that does."""
    reasons: dict[int, str] = {}
    head = _output_head(model)
    head_params = {id(p) for p in head.parameters()} if head is not None else set()
    for module_name, module in model.named_modules():
        for local, p in module.named_parameters(recurse=False):
            if id(p) in reasons:
                continue
            name = f"{module_name}.{local}" if module_name else local
            if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
                reasons[id(p)] = "embedding"
            elif _is_norm_module(module):
                reasons[id(p)] = "norm"
            elif local == "bias":
                reasons[id(p)] = "bias"
            elif id(p) in head_params:
                reasons[id(p)] = "output head"
            elif p.ndim != 2:
                reasons[id(p)] = f"{p.ndim}-D"
            elif pattern is not None and pattern.search(name):
                reasons[id(p)] = f"name matches {pattern.pattern!r}"
    return reasons


def param_groups(
    model: nn.Module,
    adam_pattern: str | None = ADAM_NAME_PATTERN,
    key: str = "use_sinkgd",
) -> list[dict[str, Any]]:
    """Split a model's trainable parameters the way the paper does.

    Routing is by module type first: the parameters of ``nn.Embedding``/``nn.EmbeddingBag``, of
    normalisation layers (torch's LayerNorm/RMSNorm/GroupNorm/BatchNorm and any class whose name ends
    in ``Norm``, such as ``LlamaRMSNorm``), every ``bias``, the output head (what
    ``model.get_output_embeddings()`` returns, for transformers models) and every parameter that is
    not 2-D go to the AdamW group. On top of that, a matrix whose qualified name matches
    ``adam_pattern`` (default ``embed|lm_head|norm|bias``; ``None`` to turn the name rule off) goes
    to AdamW too. Every other matrix goes to the matrix group. Tied weights appear once
    (``named_parameters`` de-duplicates); frozen parameters are left out; empty groups are dropped.
    Review the result on a new architecture: a classifier head that is a plain ``nn.Linear`` named
    ``score`` in a model without ``get_output_embeddings`` would go to SinkGD.

    Args:
        model: the module.
        adam_pattern: regular expression searched in each parameter's qualified name, an extra
            rule beside the module types (``None``: module types only).
        key: the group flag (``"use_sinkgd"`` for :class:`SinkGDWithAdam`, ``"use_swan"`` for
            :class:`SWANWithAdam`).

    Returns:
        ``[{"params": [...], "param_names": [...], key: True}, {..., key: False}]``.

    Example:
        >>> import torch, sinkgd
        >>> m = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 4))
        >>> [(g["use_sinkgd"], g["param_names"]) for g in sinkgd.param_groups(m)]
        [(True, ['1.weight']), (False, ['0.weight', '1.bias'])]
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if adam_pattern is not None and not isinstance(adam_pattern, str):
        raise TypeError(
            f"adam_pattern: expected a regular expression string or None, got "
            f"{type(adam_pattern).__name__}"
        )
    try:
        pattern = re.compile(adam_pattern) if adam_pattern else None
    except re.error as e:
        raise ValueError(
            f"adam_pattern: not a valid regular expression ({e}): {adam_pattern!r}"
        ) from None
    reasons = _adam_reasons(model, pattern)
    matrix, adam = ([], []), ([], [])
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        dest = adam if id(p) in reasons else matrix
        dest[0].append(p)
        dest[1].append(name)
    groups = [
        {"params": matrix[0], "param_names": matrix[1], key: True},
        {"params": adam[0], "param_names": adam[1], key: False},
    ]
    return [g for g in groups if g["params"]]


class _MatrixWithAdam(Optimizer):
    """One optimizer over matrix groups (flag ``_key`` True) and AdamW groups (flag False)."""

    _key = ""
    _matrix_options: tuple[str, ...] = ()
    _adam_options = ("lr", "betas", "eps", "weight_decay")

    def __init__(
        self,
        groups: Iterable[dict[str, Any]] | nn.Module,
        lr: float,
        matrix_scale: float,
        matrix_defaults: dict[str, Any],
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
    ) -> None:
        if isinstance(groups, nn.Module):
            groups = param_groups(groups, key=self._key)
        groups = list(groups)
        if not groups or not all(isinstance(g, dict) for g in groups):
            raise TypeError(
                f"groups: expected a non-empty list of param-group dicts with a {self._key!r} flag "
                f"(see sinkgd.param_groups) or an nn.Module, got {groups!r:.200}"
            )
        self._adam_defaults = {
            "lr": _check_lr(lr),
            "betas": _check_betas(betas),
            "eps": check_eps(eps),
            "weight_decay": _check_nonneg(weight_decay, "weight_decay"),
        }
        self._matrix_defaults = {
            "lr": _check_lr(matrix_scale * lr)
            if not isinstance(lr, torch.Tensor)
            else lr * matrix_scale,
            "eps": check_eps(eps),
            "weight_decay": _check_nonneg(weight_decay, "weight_decay"),
            **matrix_defaults,
        }
        super().__init__(groups, {})

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group; it must carry the boolean flag (``use_sinkgd`` / ``use_swan``)."""
        if not isinstance(param_group, dict) or self._key not in param_group:
            raise ValueError(
                f"param_group: every group needs a boolean {self._key!r} key (True: matrices for "
                f"the matrix optimizer; False: AdamW), got keys "
                f"{sorted(param_group) if isinstance(param_group, dict) else type(param_group).__name__}"
            )
        use_matrix = param_group[self._key]
        if not isinstance(use_matrix, bool):
            raise TypeError(f"param_group: {self._key!r} must be a bool, got {use_matrix!r}")
        allowed = self._matrix_options if use_matrix else self._adam_options
        extra = set(param_group) - set(allowed) - {"params", "param_names", self._key, "initial_lr"}
        if extra:
            kind = "matrix" if use_matrix else "AdamW"
            raise ValueError(
                f"param_group: unexpected options {sorted(extra)} for a {kind} group "
                f"(allowed: {sorted(allowed)})"
            )
        _check_group_options(param_group)
        group = dict(param_group)
        defaults = self._matrix_defaults if use_matrix else self._adam_defaults
        for name, value in defaults.items():
            group.setdefault(name, value)
        super().add_param_group(group)
        if use_matrix:
            try:
                _check_matrices(self.param_groups[-1], type(self).__name__)
            except (TypeError, ValueError):
                self.param_groups.pop()
                raise

    def _matrix_step(
        self, group: dict[str, Any], pairs: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        """The matrix update of one group; each concrete hybrid (SinkGD, SWAN) defines its own."""
        raise TypeError(
            f"{type(self).__name__}: _MatrixWithAdam is a base class; use SinkGDWithAdam or SWANWithAdam"
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One step: the matrix update on flagged groups, AdamW on the others; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group[self._key]:
                pairs = _grads_with_params(group, type(self).__name__)
                if pairs:
                    self._matrix_step(group, pairs)
            else:
                _adamw_update_(group, self.state)
        return loss


class SinkGDWithAdam(_MatrixWithAdam):
    """SinkGD on weight matrices and AdamW on embeddings, ``lm_head``, norms and biases, in one optimizer.

    Groups flagged ``use_sinkgd=True`` get SinkGD at ``sinkgd_scale · lr`` (the paper's η ≈ 0.05 ×
    0.02 = 1e-3); groups flagged ``False`` get AdamW at ``lr``. A group's own options win. Only the
    AdamW groups hold state.

    Args:
        groups: param groups from :func:`param_groups` (or your own, each with a ``use_sinkgd``
            bool), or an ``nn.Module`` to be split by :func:`param_groups`.
        lr: the global learning rate (AdamW groups).
        sinkgd_scale: α, SinkGD's lr relative to ``lr``.
        num_iters: L for the SinkGD groups.
        betas: AdamW's betas.
        eps: AdamW's ε and SinkGD's norm clamp.
        weight_decay: decoupled weight decay for both kinds (the paper: 0).
        foreach: SinkGD's batched path (``None``: on, capped batches on CPU).
        backend: SinkGD's normalisation backend.

    Example:
        >>> import torch, sinkgd
        >>> model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
        >>> opt = sinkgd.SinkGDWithAdam(sinkgd.param_groups(model), lr=0.02)
        >>> model(torch.tensor([[1, 2, 3]])).sum().backward()
        >>> opt.step()
    """

    _key = "use_sinkgd"
    _matrix_options = ("lr", "num_iters", "weight_decay", "eps", "foreach", "backend")

    def __init__(
        self,
        groups: Iterable[dict[str, Any]] | nn.Module,
        lr: float = 0.02,
        sinkgd_scale: float = 0.05,
        num_iters: int = 5,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        backend: str = "auto",
    ) -> None:
        _check_nonneg(sinkgd_scale, "sinkgd_scale")
        super().__init__(
            groups,
            lr,
            sinkgd_scale,
            {
                "num_iters": check_num_iters(num_iters),
                "foreach": foreach,
                "backend": _check_backend(backend),
            },
            betas,
            eps,
            weight_decay,
        )

    def _matrix_step(
        self, group: dict[str, Any], pairs: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        foreach = group["foreach"]
        if foreach is None:
            foreach = True  # batched on every device (capped batches on CPU)
        sinkgd_update_(
            [p for p, _ in pairs],
            [g for _, g in pairs],
            group["lr"],
            group["num_iters"],
            group["weight_decay"],
            group["eps"],
            foreach=foreach,
            backend=group["backend"],
        )


class SWANWithAdam(_MatrixWithAdam):
    """SWAN on weight matrices (groups flagged ``use_swan``) and AdamW elsewhere, in one optimizer.

    Args:
        groups: param groups (``sinkgd.param_groups(model, key="use_swan")``) or an ``nn.Module``.
        lr: the global learning rate (AdamW groups).
        swan_scale: SWAN's lr relative to ``lr``.
        ns_steps: Newton–Schulz iterations.
        betas, eps, weight_decay: as in :class:`SinkGDWithAdam`.
        rescale: see :class:`SWAN`.
    """

    _key = "use_swan"
    _matrix_options = ("lr", "ns_steps", "weight_decay", "eps", "rescale")

    def __init__(
        self,
        groups: Iterable[dict[str, Any]] | nn.Module,
        lr: float = 0.02,
        swan_scale: float = 0.05,
        ns_steps: int = 10,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        rescale: bool = True,
    ) -> None:
        _check_nonneg(swan_scale, "swan_scale")
        super().__init__(
            groups,
            lr,
            swan_scale,
            {"ns_steps": check_num_iters(ns_steps, "ns_steps"), "rescale": bool(rescale)},
            betas,
            eps,
            weight_decay,
        )

    def _matrix_step(
        self, group: dict[str, Any], pairs: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        swan_update_(
            [p for p, _ in pairs],
            [g for _, g in pairs],
            group["lr"],
            group["ns_steps"],
            group["weight_decay"],
            group["eps"],
            group["rescale"],
        )


def optimizer_state_bytes(optimizer: Optimizer) -> int:
    """Bytes held by the tensors of ``optimizer.state`` (meta tensors count their would-be size).

    Args:
        optimizer: any ``torch.optim.Optimizer``.

    Returns:
        The sum of ``numel · element_size`` over every tensor in the per-parameter state.
    """
    total = 0
    for st in optimizer.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total
