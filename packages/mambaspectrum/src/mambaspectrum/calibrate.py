"""SPSA calibration of the per-layer scales with the official schedules (no weight training)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class Calibration:
    """The result of :func:`calibrate_spsa`: the best scales by calibration loss, and the trace."""

    scales: torch.Tensor
    loss: float
    initial_loss: float
    history: list[dict] = field(default_factory=list)


@torch.no_grad()
def sequence_nll(model, ids: torch.Tensor, process_group=None) -> float:
    """Mean next-token NLL over all positions of ``ids`` (n, L), all-reduced over ``process_group``.

    With a process group the sequences are sharded over the ranks (rank r takes rows r, r+W, ...).
    """
    rows = ids
    if process_group is not None:
        import torch.distributed as dist

        rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
        rows = ids[rank::world]
    total = torch.zeros(2, dtype=torch.float64)
    if rows.shape[0]:
        # use_cache=False: in eval mode transformers builds a cache for a plain forward, which
        # sends Mamba-1 through its slow path instead of the patched chunked scan
        logits = model(rows[:, :-1], use_cache=False).logits.float()
        total[0] = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1), reduction="sum"
        ).double()
        total[1] = rows[:, 1:].numel()
    if process_group is not None:
        import torch.distributed as dist

        dist.all_reduce(total, group=process_group)
    return float(total[0] / total[1])


def spsa(
    loss_fn,
    dim,
    iters=30,
    c0=0.1,
    a0=1e-3,
    init=(0.75, 1.0),
    clip=(0.01, 1.0),
    seed=0,
    c_decay=0.1,
    period=198.0,
):
    """SPSA with the official schedules on any ``loss_fn(np.ndarray) -> float``.

    ``c = c0 / (1 + x)**0.1``, ``alpha = a0 * cos(x * pi / 198)``, Rademacher perturbations,
    ``t = clip(t - alpha * (f(t+) - f(t-)) * delta / (2c))``. Keeps the best evaluated point.

    Example:
        >>> r = spsa(lambda t: float(((t - 0.3) ** 2).sum()), dim=3, iters=200, a0=0.5)
        >>> bool(abs(r.scales - 0.3).max() < 0.05)
        True
    """
    if not isinstance(iters, int) or iters < 0:
        raise ValueError(f"iters: expected a non-negative int, got {iters!r}")
    lo, hi = clip
    if not (lo > 0 and hi > lo):
        raise ValueError(f"clip: expected 0 < low < high, got {clip}")
    rng = np.random.default_rng(seed)
    t = np.clip(rng.uniform(init[0], init[1], size=dim), lo, hi)
    f0 = float(loss_fn(t))
    best_t, best_f = t.copy(), f0
    history = [{"iter": -1, "loss": f0}]
    for x in range(iters):
        c = c0 / (1 + x) ** c_decay
        alpha = a0 * math.cos(x * math.pi / period)
        d = rng.choice([-1.0, 1.0], size=dim)
        tp, tm = np.clip(t + c * d, lo, hi), np.clip(t - c * d, lo, hi)
        fp, fm = float(loss_fn(tp)), float(loss_fn(tm))
        for cand, f in ((tp, fp), (tm, fm)):
            if f < best_f:
                best_t, best_f = cand.copy(), f
        g = (fp - fm) * d / (2 * c)
        t = np.clip(t - alpha * g, lo, hi)
        history.append({"iter": x, "loss_plus": fp, "loss_minus": fm})
    return Calibration(
        scales=torch.as_tensor(best_t, dtype=torch.float32),
        loss=best_f,
        initial_loss=f0,
        history=history,
    )


def calibrate_spsa(
    model,
    calib_ids,
    scaler,
    iters=30,
    c0=0.1,
    a0=1e-3,
    init=(0.75, 1.0),
    clip=(0.01, 1.0),
    objective="ppl",
    seed=0,
    process_group=None,
) -> Calibration:
    """Calibrate ``scaler``'s scales on ``calib_ids`` (n, L) by SPSA; leaves the best scales set.

    ``objective="ppl"`` (the official one: calibration perplexity, not its log) or ``"nll"``.
    Only calibration data is looked at; every rank of ``process_group`` draws the same
    perturbations (same seed) and sees the all-reduced loss, so all ranks agree.
    """
    from .scaler import Scaler

    if not isinstance(scaler, Scaler):
        raise TypeError(f"scaler: expected a mambaspectrum.Scaler, got {type(scaler).__name__}")
    if (
        not isinstance(calib_ids, torch.Tensor)
        or calib_ids.dim() != 2
        or calib_ids.is_floating_point()
    ):
        raise ValueError(
            f"calib_ids: expected a 2-D integer tensor (n, L), got {getattr(calib_ids, 'shape', calib_ids)!r}"
        )
    if calib_ids.shape[1] < 2:
        raise ValueError(
            f"calib_ids: expected at least 2 tokens per sequence, got {calib_ids.shape[1]}"
        )
    if objective not in ("ppl", "nll"):
        raise ValueError(f"objective: expected 'ppl' or 'nll', got {objective!r}")
    shape = scaler.shape

    def loss(t):
        scaler.set(torch.as_tensor(t, dtype=torch.float32).reshape(shape))
        nll = sequence_nll(model, calib_ids, process_group)
        return math.exp(min(nll, 700.0)) if objective == "ppl" else nll

    result = spsa(loss, int(np.prod(shape)), iters, c0, a0, init, clip, seed)
    result.scales = result.scales.reshape(shape)
    scaler.set(result.scales)
    return result


def calibrate_grad(
    model,
    batches,
    scaler,
    lr=1e-2,
    steps=30,
    init=1.0,
    clip=(0.01, 1.0),
    process_group=None,
) -> Calibration:
    """Train ``scaler``'s scales by gradient descent on the NLL of ``batches``; weights stay frozen.

    Adam on the scales (every other weight is read, never written and gets no ``.grad``): the
    scaled weights come from :meth:`Scaler.scaled_parameters` and the model runs through
    ``torch.func.functional_call``, so autograd reaches the scales through the scan (patch a
    Mamba-1 with :func:`~mambaspectrum.patch_fast_forward` for long sequences). Step ``k`` uses
    ``batches[k % len(batches)]``; after each step the scales are clipped to ``clip``. The best
    iterate by calibration loss (each iterate's loss on the batch of its step; give one batch for
    a like-for-like choice) is kept and left set, as :func:`calibrate_spsa` does. With ``process_group`` every batch is sharded
    over the ranks (rank r takes rows r, r + W, ...); the NLL sums, token counts and gradients are
    all-reduced, so every rank takes the same step as one process on the whole batch.

    Args:
        model: the Mamba/Mamba2 model ``scaler`` was built on.
        batches: a 2-D integer tensor (n, L), or a non-empty list of them.
        scaler: a :class:`~mambaspectrum.Scaler`.
        lr: Adam's learning rate (> 0).
        steps: number of gradient steps (>= 0).
        init: the initial scale (a number, the same for every entry).
        clip: ``(low, high)`` bounds of the scales, ``0 < low < high``.
        process_group: a ``torch.distributed`` group, or ``None`` for one process.

    Returns:
        :class:`Calibration` with the best scales, their loss, the loss at ``init`` and the trace.

    Example:
        >>> from transformers import MambaConfig, MambaForCausalLM
        >>> from mambaspectrum import Scaler
        >>> _ = torch.manual_seed(0)
        >>> model = MambaForCausalLM(
        ...     MambaConfig(vocab_size=16, hidden_size=8, num_hidden_layers=2, state_size=4)
        ... ).eval()
        >>> ids = torch.randint(0, 16, (2, 24))
        >>> res = calibrate_grad(model, ids, Scaler(model), lr=0.05, steps=5)
        >>> res.loss <= res.initial_loss
        True
    """
    from torch.func import functional_call

    from .scaler import Scaler

    if not isinstance(scaler, Scaler):
        raise TypeError(f"scaler: expected a mambaspectrum.Scaler, got {type(scaler).__name__}")
    if isinstance(batches, torch.Tensor):
        batches = [batches]
    if not isinstance(batches, (list, tuple)) or not batches:
        raise ValueError("batches: expected a 2-D integer tensor or a non-empty list of them")
    for i, b in enumerate(batches):
        if (
            not isinstance(b, torch.Tensor)
            or b.dim() != 2
            or b.is_floating_point()
            or b.shape[1] < 2
        ):
            raise ValueError(
                f"batches: entry {i} must be a 2-D integer tensor (n, L >= 2), "
                f"got {getattr(b, 'dtype', type(b).__name__)} {tuple(getattr(b, 'shape', ()))}"
            )
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a finite number > 0, got {lr!r}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps: expected a non-negative int, got {steps!r}")
    lo, hi = clip
    if not (lo > 0 and hi > lo):
        raise ValueError(f"clip: expected 0 < low < high, got {clip}")
    if not (isinstance(init, (int, float)) and lo <= init <= hi):
        raise ValueError(f"init: expected a number in clip [{lo}, {hi}], got {init!r}")
    if process_group is not None:
        import torch.distributed as dist

        rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
    else:
        rank, world = 0, 1

    def reduce(t):
        if process_group is not None:
            dist.all_reduce(t, group=process_group)
        return t

    scales = torch.full(scaler.shape, float(init), dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([scales], lr=lr)
    history, best_s, best_f, f0 = [], None, math.inf, None
    with torch.enable_grad():
        for k in range(steps + 1):
            rows = batches[k % len(batches)][rank::world]
            count = float(batches[k % len(batches)][:, 1:].numel())  # the whole batch's tokens
            if rows.shape[0]:
                params = scaler.scaled_parameters(scales)
                logits = functional_call(model, params, (rows[:, :-1],)).logits.float()
                nll = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1), reduction="sum"
                )
                (grad,) = torch.autograd.grad(nll / count, [scales])
                value = nll.detach().double() / count
            else:
                grad, value = torch.zeros_like(scales), torch.zeros((), dtype=torch.float64)
            grad = reduce(grad.contiguous())
            f = float(reduce(value.reshape(1)))
            if f0 is None:
                f0 = f
            if f < best_f:
                best_s, best_f = scales.detach().clone(), f
            history.append({"step": k, "loss": f, "scales": scales.detach().flatten().tolist()})
            if k == steps:
                break
            scales.grad = grad
            opt.step()
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                scales.clamp_(lo, hi)
    scaler.set(best_s)
    return Calibration(scales=best_s, loss=best_f, initial_loss=f0, history=history)
