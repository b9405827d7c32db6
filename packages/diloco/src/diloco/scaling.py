"""Scaling-law fits (§6 of the paper), the idealized wall-clock model (App. A) and the paper's tables.

* Independent fits: ``L(N) = A·N^α`` by linear regression of log L on log N (:func:`fit_power_law`).
* Joint fits: ``f(N, M) = A·N^α·M^β`` by linear regression on logs (:func:`fit_joint_power_law`).
* Batch fits: the vertex of a quadratic in log2 B (:func:`batch_vertex`).
* Parametric forms 1–4 fitted by L-BFGS on a Huber loss of log residuals from many random starts,
  keeping the start with the lowest held-out error (:func:`fit_parametric`).
* Leave-one-out: fit without the largest N, predict it (:func:`leave_one_out`).

Example (Table 4's DP column at the nominal sizes gives Table 7's DP row):

    >>> A, alpha = fit_power_law(PAPER["sizes"], PAPER["table4"]["DP"])
    >>> round(A, 2), round(alpha, 4)
    (18.17, -0.0954)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "NETWORKS",
    "PAPER",
    "batch_vertex",
    "fit_joint_power_law",
    "fit_parametric",
    "fit_power_law",
    "leave_one_out",
    "parametric_form",
    "residual",
    "wallclock",
]

_SIZES = [35e6, 90e6, 180e6, 335e6, 550e6, 1.3e9, 2.4e9]

#: Numbers transcribed from the paper (arXiv 2503.09799v1) through the spec; each entry says where
#: it comes from. Tables 5, 6 and 13 are not transcribed (the spec does not carry them).
PAPER: dict[str, Any] = {
    "sizes": _SIZES,
    "table4": {  # Table 4: eval loss per model size; columns DP and DiLoCo M = 1, 2, 4, 8
        "provenance": "Table 4 (eval loss, best hyperparameters per cell), H = 30",
        "DP": [3.485, 3.167, 2.950, 2.784, 2.653, 2.460, 2.326],
        1: [3.482, 3.162, 2.943, 2.777, 2.645, 2.451, 2.317],
        2: [3.508, 3.182, 2.957, 2.788, 2.657, 2.464, 2.323],
        4: [3.554, 3.213, 2.981, 2.808, 2.673, 2.472, 2.332],
        8: [3.621, 3.265, 3.019, 2.841, 2.698, 2.493, 2.351],
    },
    "table7": {  # independent loss fits (A, alpha)
        "provenance": "Table 7: L(N) = A N^alpha per algorithm",
        "DP": (18.129, -0.0953),
        1: (18.363, -0.0961),
        2: (18.768, -0.0969),
        4: (19.762, -0.0992),
        8: (21.051, -0.1018),
    },
    "table8": {  # inner learning rate fits
        "provenance": "Table 8: gamma*(N) = A N^alpha",
        "DP": (16319.2, -0.819),
        1: (74620.6, -0.945),
        2: (3978.82, -0.780),
        4: (4512.99, -0.789),
        8: (618986.0, -1.102),
    },
    "table9": {  # batch fits (units: 2048-token sequences, our reading)
        "provenance": "Table 9: B*(N) = A N^alpha",
        "DP": (0.22592, 0.281),
        1: (0.01361, 0.435),
        2: (0.00769, 0.479),
        4: (0.00535, 0.510),
        8: (0.01859, 0.455),
    },
    "table10": {
        "provenance": "Table 10: joint fits f(N, M) = A N^alpha M^beta",
        "loss": (19.226, -0.0985, 0.0116),
        "inner_lr": (22256.0, -0.8827, 0.2929),
        "batch": (0.00709, 0.4695, 0.3399),
    },
    "table11": {
        "provenance": "Table 11: leave-one-out residual |log y - log yhat| at 2.4B, mean over M",
        "loss": {"independent": 0.012, "joint": 0.012},
        "inner_lr": {"independent": 0.30, "joint": 0.19},
        "batch": {"independent": 0.19, "joint": 0.19},
    },
    "table12": {
        "provenance": "Table 12: eval loss at 4B / 10B with predicted hyperparameters",
        "DP": (2.224, 2.090),
        2: ((2.218, 2.220), (2.083, 2.086)),
    },
    "parametric_residuals": {
        "provenance": "Sec. 6.5: held-out (2.4B) residuals of forms 1-4",
        1: 0.0044,
        2: 0.0035,
        3: 0.0025,
        4: 0.0043,
    },
    "fig7_outer_lr": {"provenance": "Fig. 7, N >= 335M", 1: 0.4, 2: 0.6, 4: 0.6, 8: 0.8},
}

#: App. A's networks: (bandwidth in bits/s, latency ε in seconds).
NETWORKS: dict[str, tuple[float, float]] = {
    "10Gbps": (10e9, 1e-2),
    "100Gbps": (100e9, 1e-3),
    "400Gbps": (400e9, 1e-4),
}


def _positive(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name}: expected finite positive values, got {arr.tolist()}")
    return arr


def _same_length(**arrays: np.ndarray) -> None:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"lengths differ: {lengths}")


def fit_power_law(N: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """``(A, α)`` of ``y = A·N^α``, least squares on log y = log A + α log N (>= 2 points)."""
    n, v = _positive("N", N), _positive("y", y)
    _same_length(N=n, y=v)
    if len(n) < 2 or np.ptp(np.log(n)) == 0:
        raise ValueError("N: need at least two distinct sizes to fit a power law")
    alpha, log_a = np.polyfit(np.log(n), np.log(v), 1)
    return float(math.exp(log_a)), float(alpha)


def fit_joint_power_law(
    N: Sequence[float], M: Sequence[float], y: Sequence[float]
) -> tuple[float, float, float]:
    """``(A, α, β)`` of ``y = A·N^α·M^β``, least squares on logs (DP is not part of it)."""
    n, m, v = _positive("N", N), _positive("M", M), _positive("y", y)
    _same_length(N=n, M=m, y=v)
    design = np.stack([np.ones_like(n), np.log(n), np.log(m)], axis=1)
    if np.linalg.matrix_rank(design) < 3:
        raise ValueError("N, M: need at least two distinct sizes and two distinct replica counts")
    coef, *_ = np.linalg.lstsq(design, np.log(v), rcond=None)
    return float(math.exp(coef[0])), float(coef[1]), float(coef[2])


def batch_vertex(log2_batch: Sequence[float], loss: Sequence[float]) -> float:
    """log2 of the best batch: the vertex of a quadratic fit of loss in log2 B (>= 3 batches).

    When the fitted parabola is not convex (no interior minimum) the best observed log2 B is
    returned instead; a vertex outside the swept range is clipped to it.
    """
    b = np.asarray(log2_batch, dtype=np.float64)
    v = _positive("loss", loss)
    if b.ndim != 1 or not np.all(np.isfinite(b)):
        raise ValueError(f"log2_batch: expected finite values, got {b.tolist()}")
    _same_length(log2_batch=b, loss=v)
    if len(np.unique(b)) < 3:
        raise ValueError("log2_batch: need at least three distinct batch sizes for a quadratic")
    a2, a1, _ = np.polyfit(b, v, 2)
    if a2 <= 0:
        return float(b[np.argmin(v)])
    return float(np.clip(-a1 / (2 * a2), b.min(), b.max()))


def residual(y: Any, y_hat: Any) -> np.ndarray | float:
    """``|log y − log ŷ|`` (the paper's goodness-of-fit measure)."""
    a, b = np.asarray(y, dtype=np.float64), np.asarray(y_hat, dtype=np.float64)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("y, y_hat: expected positive values")
    out = np.abs(np.log(a) - np.log(b))
    return float(out) if out.ndim == 0 else out


def leave_one_out(
    N: Sequence[float], y: Sequence[float], M: Sequence[float] | None = None
) -> dict[str, Any]:
    """Fit without the largest N, predict it; ``M`` given: the joint fit, else the independent one.

    Returns ``{"params", "predicted", "actual", "residual"}`` (residual: mean |log| over the
    held-out points).
    """
    n, v = _positive("N", N), _positive("y", y)
    _same_length(N=n, y=v)
    held = n == n.max()
    if held.all():
        raise ValueError("N: need more than one size to hold the largest out")
    if M is None:
        params = fit_power_law(n[~held], v[~held])
        pred = params[0] * n[held] ** params[1]
    else:
        m = _positive("M", M)
        _same_length(N=n, M=m)
        params = fit_joint_power_law(n[~held], m[~held], v[~held])
        pred = params[0] * n[held] ** params[1] * m[held] ** params[2]
    res = residual(v[held], pred)
    return {
        "params": params,
        "predicted": pred.tolist(),
        "actual": v[held].tolist(),
        "residual": float(np.mean(res)),
    }


def parametric_form(form: int, params: Any, N: Any, M: Any) -> Any:
    """The §6.5 forms (params in log space where positive: log A, log C, log B).

    1. A·N^α·M^β            params (log A, α, β)
    2. A·N^α·M^β + C        params (log A, α, β, log C)
    3. A·N^(α+β·M) + C      params (log A, α, β, log C)  (our reading of the printed form)
    4. A·N^α + B·M^β + C    params (log A, α, log B, β, log C)

    Works on numpy arrays and on torch tensors (the fit differentiates it with autograd).
    """
    import torch

    xp = torch if isinstance(params, torch.Tensor) else np
    exp, log = xp.exp, xp.log
    log_n, log_m = log(N), log(M)
    if form == 1:
        return exp(params[0] + params[1] * log_n + params[2] * log_m)
    if form == 2:
        return exp(params[0] + params[1] * log_n + params[2] * log_m) + exp(params[3])
    if form == 3:
        return exp(params[0] + (params[1] + params[2] * M) * log_n) + exp(params[3])
    if form == 4:
        return (
            exp(params[0] + params[1] * log_n) + exp(params[2] + params[3] * log_m) + exp(params[4])
        )
    raise ValueError(f"form: expected 1, 2, 3 or 4, got {form!r}")


_N_PARAMS = {1: 3, 2: 4, 3: 4, 4: 5}


def fit_parametric(
    N: Sequence[float],
    M: Sequence[float],
    L: Sequence[float],
    form: int,
    huber_delta: float = 1e-3,
    n_starts: int = 256,
    holdout: Sequence[bool] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Fit form 1–4 by L-BFGS on Σ Huber_δ(log f − log L) over the training points, many starts.

    Args:
        N, M, L: sizes, replica counts and losses (same length, positive).
        form: 1, 2, 3 or 4 (see :func:`parametric_form`).
        huber_delta: δ of the Huber loss (the paper does not state it; 1e-3 follows Hoffmann
            et al.: our choice).
        n_starts: random initialisations; the one with the lowest held-out mean |log residual|
            is kept (the lowest training objective when nothing is held out).
        holdout: a boolean mask of held-out points (the paper holds out every N = 2.4B point);
            None: ``N == max(N)`` when there are at least two sizes.
        seed: seeds the starts.

    Returns:
        ``{"form", "params", "train_objective", "holdout_residual", "starts"}``.
    """
    from scipy.optimize import minimize

    n, m, v = _positive("N", N), _positive("M", M), _positive("L", L)
    _same_length(N=n, M=m, L=v)
    if form not in _N_PARAMS:
        raise ValueError(f"form: expected 1, 2, 3 or 4, got {form!r}")
    if not (isinstance(huber_delta, (int, float)) and huber_delta > 0):
        raise ValueError(f"huber_delta: expected a number > 0, got {huber_delta!r}")
    if not isinstance(n_starts, int) or n_starts < 1:
        raise ValueError(f"n_starts: expected an int >= 1, got {n_starts!r}")
    if holdout is None:
        mask = n == n.max() if len(np.unique(n)) > 1 else np.zeros_like(n, dtype=bool)
    else:
        mask = np.asarray(holdout, dtype=bool)
        if mask.shape != n.shape:
            raise ValueError(f"holdout: expected {n.shape} booleans, got shape {mask.shape}")
    train = ~mask
    if train.sum() < _N_PARAMS[form]:
        raise ValueError(
            f"N: {train.sum()} training points for {_N_PARAMS[form]} parameters of form {form}"
        )
    import torch

    log_v = np.log(v)
    # Fit in N / scale (A stays near 1, L-BFGS well conditioned); form 3's M-dependent exponent
    # does not survive that rescaling, so it is fitted in N itself.
    scale = float(np.exp(np.mean(np.log(n)))) if form != 3 else 1.0
    ns = n / scale
    t_n, t_m = torch.as_tensor(ns[train]), torch.as_tensor(m[train])
    t_v = torch.as_tensor(log_v[train])

    def objective(p: np.ndarray) -> tuple[float, np.ndarray]:
        x = torch.tensor(p, dtype=torch.float64, requires_grad=True)
        r = torch.log(parametric_form(form, x, t_n, t_m)) - t_v
        a = r.abs()
        loss = torch.where(
            a <= huber_delta, 0.5 * r**2, huber_delta * (a - 0.5 * huber_delta)
        ).sum()
        if not torch.isfinite(loss):
            return 1e12, np.zeros_like(p)
        loss.backward()
        return float(loss.detach()), x.grad.numpy().copy()

    rng = np.random.default_rng(seed)
    log_ns, log_ms = np.log(ns[train]), np.log(m[train])
    best: dict[str, Any] | None = None
    for _ in range(n_starts):
        # Random exponents (and offsets), then the amplitude that fits the data on average.
        alpha, beta = rng.uniform(-0.5, 0.0), rng.uniform(-0.05, 0.05)
        c = float(np.min(v)) * rng.uniform(0.0, 0.9)
        rest = np.log(np.maximum(v[train] - c, 1e-12))
        if form == 1:
            p0 = [np.mean(log_v[train] - alpha * log_ns - beta * log_ms), alpha, beta]
        elif form == 2:
            p0 = [
                np.mean(rest - alpha * log_ns - beta * log_ms),
                alpha,
                beta,
                math.log(max(c, 1e-6)),
            ]
        elif form == 3:
            beta = rng.uniform(-0.01, 0.01)
            p0 = [
                np.mean(rest - (alpha + beta * m[train]) * log_ns),
                alpha,
                beta,
                math.log(max(c, 1e-6)),
            ]
        else:
            b_amp = rng.uniform(-6.0, 0.0)
            beta = rng.uniform(-1.0, 1.0)
            p0 = [np.mean(rest - alpha * log_ns), alpha, b_amp, beta, math.log(max(c, 1e-6))]
        res = minimize(
            objective,
            np.asarray(p0, dtype=np.float64),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12},
        )
        p = res.x
        if mask.any():
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                pred = parametric_form(form, p, ns[mask], m[mask])
                score = float(np.mean(np.abs(np.log(pred) - log_v[mask])))
        else:
            score = float(res.fun)
        if not math.isfinite(score):
            continue
        if best is None or score < best["score"]:
            best = {"score": score, "params": p, "fun": float(res.fun)}
    if best is None:
        raise RuntimeError(f"fit_parametric: no start of form {form} converged to a finite fit")
    params = best["params"].copy()
    if form in (1, 2, 4):  # undo the N scaling: A·(N/s)^α = (A·s^-α)·N^α
        params[0] -= params[1] * math.log(scale)
    return {
        "form": form,
        "params": params.tolist(),
        "train_objective": best["fun"],
        "holdout_residual": best["score"] if mask.any() else None,
        "starts": n_starts,
    }


def wallclock(
    N: float,
    D: float,
    B: float,
    algo: str,
    M: int = 1,
    H: int = 30,
    network: str | tuple[float, float] = "100Gbps",
    chips: int = 256,
    flops_per_chip: float = 300e12,
    bits_per_parameter: int = 16,
    within_network: str | tuple[float, float] = "400Gbps",
) -> dict[str, float]:
    """Idealized wall-clock of App. A: compute 6ND/(R·Q) plus all-reduces of 2N(1−1/R)·bits/W + ε.

    DP all-reduces across the slow ``network`` every step. DiLoCo (M >= 2) all-reduces within a
    datacenter (``within_network``, R = chips/M) every step and across the slow network (R = M)
    every H steps; DiLoCo with M = 1 has no cross-datacenter traffic. ``B`` is in tokens; the step
    count is D/B. ``chips`` and ``within_network`` are our choices (the spec gives only Q and the
    three networks), as is 16 bits per parameter.

    Returns ``{"compute", "communication", "total"}`` in seconds and ``"cross_bytes"`` (bytes each
    participant sends across the slow network over training).
    """
    for name, value in (("N", N), ("D", D), ("B", B)):
        if not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name}: expected a number > 0, got {value!r}")
    if algo not in ("dp", "diloco"):
        raise ValueError(f"algo: expected 'dp' or 'diloco', got {algo!r}")
    if not isinstance(M, int) or M < 1:
        raise ValueError(f"M: expected an int >= 1, got {M!r}")
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H: expected an int >= 1, got {H!r}")

    def net(x: str | tuple[float, float], name: str) -> tuple[float, float]:
        if isinstance(x, str):
            if x not in NETWORKS:
                raise ValueError(
                    f"{name}: expected one of {sorted(NETWORKS)} or (bits/s, latency), got {x!r}"
                )
            return NETWORKS[x]
        return float(x[0]), float(x[1])

    width, latency = net(network, "network")
    inner_width, inner_latency = net(within_network, "within_network")
    steps = D / B
    compute = 6 * N * D / (chips * flops_per_chip)

    def allreduce(participants: int, w: float, eps: float) -> float:
        if participants <= 1:
            return 0.0
        return 2 * N * bits_per_parameter * (1 - 1 / participants) / w + eps

    if algo == "dp":
        comm = steps * allreduce(chips, width, latency)
        cross = steps * 2 * N * bits_per_parameter / 8 * (1 - 1 / chips)
    else:
        per_group = max(1, chips // M)
        comm = steps * allreduce(per_group, inner_width, inner_latency)
        outer = math.floor(steps / H)
        comm += outer * allreduce(M, width, latency)
        cross = outer * 2 * N * bits_per_parameter / 8 * (1 - 1 / M) if M > 1 else 0.0
    return {
        "compute": compute,
        "communication": comm,
        "total": compute + comm,
        "cross_bytes": cross,
    }
