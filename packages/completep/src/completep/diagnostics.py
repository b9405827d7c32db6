"""Diagnostics: the coordinate check, the optimal-LR fit, and the log-log slope across depth."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["coord_check", "fit_optimal_lr", "loglog_slope"]


def fit_optimal_lr(lrs: Sequence[float], losses: Sequence[float]) -> dict[str, Any]:
    """η* from a quadratic in log₂η through the best point and its two grid neighbours.

    Args:
        lrs: the grid (any order, > 0).
        losses: the loss at each lr (non-finite = diverged).

    Returns:
        ``{"log2_lr": log₂η*, "edge": bool, "flat": bool}``; ``edge`` when the best point is at the
        end of the grid (η* is then that point, not a fit) and ``flat`` when the three points give
        no convex bowl (η* is then the best grid point).

    >>> round(fit_optimal_lr([2**-3, 2**-2, 2**-1], [2.0, 1.0, 2.0])["log2_lr"], 9)
    -2.0
    """
    if len(lrs) != len(losses) or len(lrs) < 1:
        raise ValueError(f"losses: expected one loss per lr, got {len(losses)} for {len(lrs)}")
    pairs = sorted(
        (math.log2(lr), loss if math.isfinite(loss) else math.inf)
        for lr, loss in zip(lrs, losses, strict=True)
    )
    xs = [p[0] for p in pairs]
    ys = [p[1] for p in pairs]
    best = min(range(len(ys)), key=ys.__getitem__)
    if best == 0 or best == len(ys) - 1 or len(ys) < 3:
        return {"log2_lr": xs[best], "edge": True, "flat": False}
    x3, y3 = xs[best - 1 : best + 2], ys[best - 1 : best + 2]
    if not all(math.isfinite(y) for y in y3):
        return {"log2_lr": xs[best], "edge": False, "flat": True}
    a, b, _ = _quadratic(x3, y3)
    if a <= 0:
        return {"log2_lr": xs[best], "edge": False, "flat": True}
    return {"log2_lr": -b / (2 * a), "edge": False, "flat": False}


def _quadratic(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    matrix = torch.tensor([[x * x, x, 1.0] for x in xs], dtype=torch.float64)
    coef = torch.linalg.solve(matrix, torch.tensor(list(ys), dtype=torch.float64))
    return float(coef[0]), float(coef[1]), float(coef[2])


def loglog_slope(depths: Sequence[float], log2_values: Sequence[float]) -> float:
    """Least-squares slope of ``log2_values`` on log₂(depth) (nan with fewer than two depths).

    >>> loglog_slope([2, 4, 8], [-5.0, -6.0, -7.0])
    -1.0
    """
    if len(depths) != len(log2_values):
        raise ValueError("log2_values: expected one value per depth")
    if len(depths) < 2:
        return math.nan
    xs = [math.log2(d) for d in depths]
    mx, my = sum(xs) / len(xs), sum(log2_values) / len(xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, log2_values, strict=True)) / sxx


def coord_check(
    make_model: Callable[[int], nn.Module],
    sizes: Sequence[int],
    batches: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    steps: int = 10,
    grad_clip: float | None = 1.0,
) -> list[dict[str, Any]]:
    """Mean |activation| per site over the first ``steps`` training steps, for each model size.

    Sites: the embedding output, each decoder layer's attention and MLP branch outputs (after the
    residual multiplier, i.e. what is added to the stream), the last block's output and the logits.

    Args:
        make_model: size -> a (parameterized) Llama-like model.
        sizes: the widths or depths to compare.
        batches: step -> (input_ids, labels).
        make_optimizer: model -> optimizer.
        steps: training steps (a record is taken at the forward of each step).
        grad_clip: global-norm clipping, as in the official coordinate checks.

    Returns:
        Records ``{"size", "step", "site", "value"}``.
    """
    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    records: list[dict[str, Any]] = []
    for size in sizes:
        model = make_model(size)
        opt = make_optimizer(model)
        inner = model.model
        current: dict[str, float] = {}

        def site(name: str, current: dict[str, float] = current):
            def hook(module, args, output):
                out = output[0] if isinstance(output, tuple) else output
                current[name] = float(out.detach().abs().mean())

            return hook

        hooks = [inner.embed_tokens.register_forward_hook(site("embedding"))]
        for i, layer in enumerate(inner.layers):
            hooks.append(layer.self_attn.o_proj.register_forward_hook(site(f"attn.{i}")))
            hooks.append(layer.mlp.down_proj.register_forward_hook(site(f"mlp.{i}")))
        hooks.append(inner.layers[-1].register_forward_hook(site("last_block")))
        hooks.append(model.lm_head.register_forward_hook(site("logits")))
        # forward hooks registered after parameterize's run after them, so values are post-multiplier
        model.train()
        with torch.enable_grad():
            for step in range(steps):
                x, y = batches(step)
                logits = model(x).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1)
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                opt.step()
                for name, value in current.items():
                    records.append({"size": size, "step": step + 1, "site": name, "value": value})
                current.clear()
        for h in hooks:
            h.remove()
    return records
