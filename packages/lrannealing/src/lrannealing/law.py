"""The LR-annealing scaling law, the baselines beside it, and the multi-start Huber fit they share.

    L(s) = L₀ + A·S₁(s)^(−α) − C·S₂(s)                         (Tissue et al., NeurIPS 2025)

Baselines, fitted by the same objective, optimizer, options and start grid (projected onto their
parameters): :class:`StepPowerLaw` (L₀ + A·(s+1)^(−α), blind to the schedule),
:class:`ForwardOnlyLaw` (C = 0) and :class:`MultiPowerLaw` (Luo et al., ICLR 2025, 7 parameters,
54 starts of its own).

Units: every fit runs in LR units ``u = max_c S₁_c(last fitted step) / 4``, so the reference's own
setting (LR 2e-4 for 20k steps, S₁ = 4) is fitted in raw units exactly as the reference does, and
rescaling every LR by c gives the same predictions to rounding. The fitted law is returned in raw
LR units (A·u^α, C/u).

Example (CPU, a second):

    >>> import numpy as np
    >>> from lrannealing import Curve, LRAnnealingLaw, fit, schedules
    >>> truth = LRAnnealingLaw(L0=2.0, A=0.5, C=0.3, alpha=0.5, decay=0.999)
    >>> steps = np.arange(200, 4001, 200)
    >>> curves = [
    ...     Curve(steps, truth.predict(lrs, steps), lrs, name=n)
    ...     for n, lrs in {
    ...         "constant": schedules.constant(4000, 1e-3),
    ...         "cosine": schedules.cosine(4000, 1e-3),
    ...     }.items()
    ... ]
    >>> result = fit(curves)
    >>> wsd = schedules.wsd(4000, 1e-3)
    >>> bool(np.allclose(result.law.predict(wsd, steps), truth.predict(wsd, steps), rtol=1e-4))
    True
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from threadpoolctl import threadpool_limits

from lrannealing._checks import as_lrs, check_choice, check_decay, check_int, check_positive
from lrannealing.areas import DEFAULT_DECAY, WARMUP_MODES, areas

__all__ = [
    "DECAY_GRID",
    "REFERENCE_GRID",
    "Curve",
    "FitResult",
    "ForwardOnlyLaw",
    "LRAnnealingLaw",
    "MultiPowerLaw",
    "StepPowerLaw",
    "evaluate",
    "fit",
]

#: The reference script's 54 starts: linspace(0.1, 2.1, 2) × linspace(1, 22, 3) ×
#: linspace(1, 22, 3) × linspace(0, 0.8, 3) over (L₀, A, C, α).
REFERENCE_GRID: dict[str, tuple[float, ...]] = {
    "L0": (0.1, 2.1),
    "A": (1.0, 11.5, 22.0),
    "C": (1.0, 11.5, 22.0),
    "alpha": (0.0, 0.4, 0.8),
}
#: λ values scanned by ``fit(..., decay="grid")``.
DECAY_GRID: tuple[float, ...] = (0.99, 0.995, 0.999, 0.9995)
#: The reference's L-BFGS-B options (``eps`` is the finite-difference step).
LBFGSB_OPTIONS = {"maxiter": 100_000, "ftol": 1e-9, "gtol": 1e-6, "eps": 1e-8}
#: The objective returned where a trial prediction is ≤ 0 or not finite (a guard, as in the spec).
PENALTY = 1e10
#: S₁^(−α) is computed as exp(clip(−α·log S₁, max=_EXP_CLIP)) so a wild trial α cannot overflow.
_EXP_CLIP = 700.0
#: The fit's S₁ scale: the largest fitted S₁ maps to this (the reference's 2e-4 × 20000).
_S1_SCALE = 4.0


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class Curve:
    """One training run: losses at ``steps`` and the LR of *every* step 0..max(steps).

    Attributes:
        steps: (n,) int steps at which the loss was measured, increasing, >= 0.
        loss: (n,) losses, finite and > 0.
        lrs: (>= max(steps)+1,) LR of optimizer steps 0..T.
        warmup_steps: length of the linear warm-up at the start of ``lrs``.
        name: a label (results tables use it).
        source: where the loss came from (``"val"``, ``"train"``, ``"train_ema"``, ...).
    """

    steps: np.ndarray
    loss: np.ndarray
    lrs: np.ndarray
    warmup_steps: int = 0
    name: str = ""
    source: str = "val"

    def __post_init__(self) -> None:
        steps = np.asarray(self.steps)
        if steps.ndim != 1 or steps.size < 1:
            raise ValueError(f"steps: expected a non-empty 1-D array, got shape {steps.shape}")
        if not np.issubdtype(steps.dtype, np.integer) and (
            not np.all(np.isfinite(steps)) or np.any(steps != np.round(steps))
        ):
            raise TypeError(f"steps: expected integer steps, got {steps.dtype}")
        steps = steps.astype(np.int64)
        if np.any(steps < 0) or np.any(np.diff(steps) <= 0):
            raise ValueError("steps: expected strictly increasing steps >= 0")
        try:
            loss = np.array(self.loss, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"loss: expected an array of numbers ({exc})") from None
        if loss.shape != steps.shape:
            raise ValueError(f"loss: expected shape {steps.shape} (one per step), got {loss.shape}")
        if not np.all(np.isfinite(loss)) or np.any(loss <= 0):
            raise ValueError("loss: expected finite losses > 0 (the fit works on log L)")
        lrs = as_lrs(self.lrs)
        if lrs.size < steps[-1] + 1:
            raise ValueError(
                f"lrs: expected the LR of every step up to max(steps)={steps[-1]}, i.e. length "
                f">= {steps[-1] + 1}, got {lrs.size}"
            )
        warmup_steps = check_int(self.warmup_steps, "warmup_steps", 0)
        if warmup_steps >= lrs.size:
            raise ValueError(f"warmup_steps: expected < len(lrs)={lrs.size}, got {warmup_steps}")
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "loss", loss)
        object.__setattr__(self, "lrs", lrs)
        object.__setattr__(self, "warmup_steps", warmup_steps)

    def after(self, step: int) -> Curve:
        """The points at ``steps >= step`` (the reference skips the earliest steps)."""
        keep = self.steps >= step
        return dataclasses.replace(self, steps=self.steps[keep], loss=self.loss[keep])


def _check_curves(curves) -> list[Curve]:
    if isinstance(curves, Curve):
        curves = [curves]
    if not isinstance(curves, Sequence) or not curves:
        raise TypeError("curves: expected a Curve or a non-empty sequence of Curve")
    for i, c in enumerate(curves):
        if not isinstance(c, Curve):
            raise TypeError(f"curves[{i}]: expected a Curve, got {type(c).__name__}")
    points = sum(c.steps.size for c in curves)
    if points < 5:
        raise ValueError(f"curves: expected at least 5 fit points in all, got {points}")
    return list(curves)


def _unit(curves: list[Curve]) -> float:
    total = max(float(c.lrs[: c.steps[-1] + 1].sum()) for c in curves)
    if total <= 0:
        raise ValueError("curves: every learning rate is 0, so S₁ = 0 and the law is undefined")
    return total / _S1_SCALE


def _steps_or_all(lrs: np.ndarray, steps) -> np.ndarray:
    if steps is None:
        return np.arange(lrs.size)
    steps = np.asarray(steps)
    if steps.ndim != 1:
        raise ValueError(f"steps: expected a 1-D array, got shape {steps.shape}")
    steps = steps.astype(np.int64)
    if steps.size and (steps.min() < 0 or steps.max() >= lrs.size):
        raise ValueError(
            f"lrs: expected the LR of every step up to max(steps)={steps.max()}, i.e. length "
            f">= {steps.max() + 1}, got {lrs.size}"
        )
    return steps


def _power(base: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(base^(−α), log base), computed as a clipped exp so a trial α cannot overflow."""
    with np.errstate(divide="ignore"):
        log = np.log(base)
    return np.exp(np.minimum(-alpha * log, _EXP_CLIP)), log


# ----------------------------------------------------------------------------- laws


class _Law:
    """What every law shares: ``predict``, ``to_dict``/``from_dict``, the fit's hooks."""

    kind: ClassVar[str]
    params: ClassVar[tuple[str, ...]]
    grid: ClassVar[dict[str, tuple[float, ...]]]

    def to_dict(self) -> dict[str, Any]:
        """The law as a JSON-able dict (``from_dict`` reads it back)."""
        return {"kind": self.kind, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        if not isinstance(data, dict):
            raise TypeError(f"data: expected a dict, got {type(data).__name__}")
        data = dict(data)
        kind = data.pop("kind", cls.kind)
        if kind != cls.kind:
            raise ValueError(f"data: describes a {kind!r}, not a {cls.kind!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"data: unknown field(s) {sorted(unknown)} for {cls.__name__}")
        return cls(**data)

    def predict(self, lrs, steps=None, warmup_steps: int = 0) -> np.ndarray:
        raise NotImplementedError

    # hooks of the fit: features in fit units, prediction and Jacobian in fit units, back to raw
    @classmethod
    def _features(cls, curve: Curve, unit: float, **options) -> dict[str, np.ndarray]:
        raise NotImplementedError

    @classmethod
    def _from_theta(cls, theta: np.ndarray, unit: float, **options):
        raise NotImplementedError

    @classmethod
    def fit(cls, curves, **kwargs) -> FitResult:
        """Fit this law to ``curves`` (see :func:`fit` for the arguments)."""
        return _fit_law(cls, curves, **kwargs)


@dataclasses.dataclass(frozen=True)
class LRAnnealingLaw(_Law):
    """L(s) = L₀ + A·S₁(s)^(−α) − C·S₂(s), with S₁, S₂ from :func:`lrannealing.areas`.

    Parameters are in raw LR units (they change with the LR's units; compare laws by their
    predictions). ``warmup`` and ``s1_include_step0`` are the conventions the areas are taken with.
    """

    L0: float
    A: float
    C: float
    alpha: float
    decay: float = DEFAULT_DECAY
    warmup: str = "as_peak"
    s1_include_step0: bool = True

    kind: ClassVar[str] = "lr_annealing"
    params: ClassVar[tuple[str, ...]] = ("L0", "A", "C", "alpha")
    grid: ClassVar[dict[str, tuple[float, ...]]] = REFERENCE_GRID

    def __post_init__(self) -> None:
        for name in ("L0", "A", "C", "alpha"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
                raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "decay", check_decay(self.decay))
        check_choice(self.warmup, "warmup", WARMUP_MODES)

    def predict(self, lrs, steps=None, warmup_steps: int = 0) -> np.ndarray:
        """The predicted loss at ``steps`` (default every step 0..T) of the schedule ``lrs`` (T+1,)."""
        s1, s2 = areas(
            lrs, self.decay, warmup_steps, self.warmup, s1_include_step0=self.s1_include_step0
        )
        idx = _steps_or_all(s1, steps)
        power, _ = _power(s1[idx], self.alpha)
        return self.L0 + self.A * power - self.C * s2[idx]

    @classmethod
    def _features(
        cls, curve, unit, decay=DEFAULT_DECAY, warmup="as_peak", s1_include_step0=True, **_
    ):
        s1, s2 = areas(curve.lrs / unit, decay, curve.warmup_steps, warmup, s1_include_step0)
        s1, s2 = s1[curve.steps], s2[curve.steps]
        if np.any(s1 <= 0):
            raise ValueError(
                f"curves: {curve.name or 'a curve'} has S₁ = 0 at a fitted step (drop step 0 or "
                "the all-zero start)"
            )
        return {"s1": s1, "s2": s2}

    @staticmethod
    def _predict_grad(theta, f):
        L0, A, C, alpha = theta
        power, log = _power(f["s1"], alpha)
        pred = L0 + A * power - C * f["s2"]
        jac = np.stack([np.ones_like(power), power, -f["s2"], -A * power * log], axis=1)
        return pred, jac

    @classmethod
    def _from_theta(
        cls, theta, unit, decay=DEFAULT_DECAY, warmup="as_peak", s1_include_step0=True, **_
    ):
        L0, A, C, alpha = (float(t) for t in theta)
        return cls(L0, A * unit**alpha, C / unit, alpha, decay, warmup, s1_include_step0)


@dataclasses.dataclass(frozen=True)
class ForwardOnlyLaw(_Law):
    """The law without its annealing term (C = 0): L₀ + A·S₁^(−α). A baseline."""

    L0: float
    A: float
    alpha: float
    decay: float = DEFAULT_DECAY
    warmup: str = "as_peak"
    s1_include_step0: bool = True

    kind: ClassVar[str] = "forward_only"
    params: ClassVar[tuple[str, ...]] = ("L0", "A", "alpha")
    grid: ClassVar[dict[str, tuple[float, ...]]] = {
        k: v for k, v in REFERENCE_GRID.items() if k != "C"
    }

    def _full(self) -> LRAnnealingLaw:
        return LRAnnealingLaw(
            self.L0, self.A, 0.0, self.alpha, self.decay, self.warmup, self.s1_include_step0
        )

    def __post_init__(self) -> None:
        self._full()  # the same checks

    def predict(self, lrs, steps=None, warmup_steps: int = 0) -> np.ndarray:
        """The predicted loss at ``steps`` (default every step) of the schedule ``lrs``."""
        return self._full().predict(lrs, steps, warmup_steps)

    _features = LRAnnealingLaw._features

    @staticmethod
    def _predict_grad(theta, f):
        L0, A, alpha = theta
        power, log = _power(f["s1"], alpha)
        pred = L0 + A * power
        return pred, np.stack([np.ones_like(power), power, -A * power * log], axis=1)

    @classmethod
    def _from_theta(
        cls, theta, unit, decay=DEFAULT_DECAY, warmup="as_peak", s1_include_step0=True, **_
    ):
        L0, A, alpha = (float(t) for t in theta)
        return cls(L0, A * unit**alpha, alpha, decay, warmup, s1_include_step0)


@dataclasses.dataclass(frozen=True)
class StepPowerLaw(_Law):
    """L₀ + A·(s+1)^(−α): a power law in steps, blind to the schedule. A baseline.

    Steps are counted like S₁ (s+1 updates by step s), so on a constant LR this law and
    :class:`ForwardOnlyLaw` coincide.
    """

    L0: float
    A: float
    alpha: float

    kind: ClassVar[str] = "step_power"
    params: ClassVar[tuple[str, ...]] = ("L0", "A", "alpha")
    grid: ClassVar[dict[str, tuple[float, ...]]] = ForwardOnlyLaw.grid

    def predict(self, lrs, steps=None, warmup_steps: int = 0) -> np.ndarray:
        lrs = as_lrs(lrs)
        idx = _steps_or_all(lrs, steps)
        power, _ = _power(idx + 1.0, self.alpha)
        return self.L0 + self.A * power

    @classmethod
    def _features(cls, curve, unit, **options):
        # In the fit the steps are scaled like S₁ (÷ the run length · 4) so the start grid means
        # the same as for the S₁ laws; _from_theta converts A back to raw steps.
        return {"s1": (curve.steps + 1.0) * options["step_unit"]}

    _predict_grad = ForwardOnlyLaw._predict_grad

    @classmethod
    def _from_theta(cls, theta, unit, **options):
        L0, A, alpha = (float(t) for t in theta)
        return cls(L0, A * options["step_unit"] ** (-alpha), alpha)


@dataclasses.dataclass(frozen=True)
class MultiPowerLaw(_Law):
    """Multi-power law (Luo et al., ICLR 2025, arXiv 2503.12811):

    L(t) = L₀ + A·S₁(t)^(−α) − B·Σ_{k=W+1}^{t} (η_{k−1} − η_k)·G(η_k^(−γ)·S_k(t)),
    G(x) = 1 − (C·x + 1)^(−β),   S_k(t) = Σ_{τ=k}^{t} η_τ,

    with S₁ the actual LR area including the warm-up (the paper's S₁ + S_W) and the loss-drop sum
    over the post-warm-up steps. O(n_points · T) per evaluation. η_k is floored at 1e-10 of the
    peak so η_k^(−γ) stays finite at an LR of exactly 0 (where G → 1).
    """

    L0: float
    A: float
    alpha: float
    B: float
    C: float
    beta: float
    gamma: float

    kind: ClassVar[str] = "multi_power"
    params: ClassVar[tuple[str, ...]] = ("L0", "A", "alpha", "B", "C", "beta", "gamma")
    #: 54 starts over (L₀, A, α, B), C = 2, β = γ = 0.5 (the paper's fitted values are of this
    #: order), in the same LR units as :data:`REFERENCE_GRID`.
    grid: ClassVar[dict[str, tuple[float, ...]]] = {
        "L0": (0.1, 2.1),
        "A": (1.0, 11.5, 22.0),
        "alpha": (0.2, 0.5, 0.8),
        "B": (50.0, 500.0, 5000.0),
        "C": (2.0,),
        "beta": (0.5,),
        "gamma": (0.5,),
    }

    @staticmethod
    def _terms(lrs: np.ndarray, steps: np.ndarray, warmup_steps: int):
        """The (point, drop) pairs with k <= s, packed flat: only steps whose LR changed count."""
        cs = np.cumsum(lrs)
        k = np.arange(warmup_steps + 1, int(steps.max()) + 1 if steps.size else 0)
        delta = lrs[k - 1] - lrs[k]
        keep = delta != 0
        k, delta = k[keep], delta[keep]
        eta = np.maximum(lrs[k], 1e-10 * lrs.max())
        counts = np.searchsorted(k, steps, side="right")  # drops at or before each point
        row = np.repeat(np.arange(steps.size), counts)
        col = np.concatenate([np.arange(c) for c in counts]) if steps.size else np.zeros(0, int)
        s_k = cs[steps][row] - cs[k - 1][col]
        return {
            "s1": cs[steps],
            "row": row,
            "n": steps.size,
            "delta": delta[col],
            "log_eta": np.log(eta)[col],
            "s_k": s_k,
        }

    def predict(self, lrs, steps=None, warmup_steps: int = 0) -> np.ndarray:
        lrs = as_lrs(lrs)
        warmup_steps = check_int(warmup_steps, "warmup_steps", 0)
        idx = _steps_or_all(lrs, steps)
        theta = np.array([getattr(self, p) for p in self.params])
        return self._predict_grad(theta, self._terms(lrs, idx, warmup_steps), jac=False)[0]

    @classmethod
    def _features(cls, curve, unit, **options):
        return cls._terms(curve.lrs / unit, curve.steps, curve.warmup_steps)

    @staticmethod
    def _predict_grad(theta, f, jac=True):
        # a trial γ or C far out overflows to inf/nan; the fit's guard turns that into its penalty
        with np.errstate(over="ignore", invalid="ignore"):
            return MultiPowerLaw._predict_grad_unguarded(theta, f, jac)

    @staticmethod
    def _predict_grad_unguarded(theta, f, jac):
        L0, A, alpha, B, C, beta, gamma = theta
        power, log = _power(f["s1"], alpha)
        row, n, d = f["row"], f["n"], f["delta"]

        def rows(values):  # Σ over the drops of each point
            return np.bincount(row, weights=values, minlength=n)

        ws = np.exp(-gamma * f["log_eta"]) * f["s_k"]
        x = C * ws
        log_u = np.log1p(x)
        p = np.exp(-beta * log_u)
        drop = rows((1.0 - p) * d)
        pred = L0 + A * power - B * drop
        if not jac:
            return pred, None
        qd = beta * p / (1.0 + x) * d  # dG/dx · Δ
        jac_m = np.stack(
            [
                np.ones_like(power),
                power,
                -A * power * log,
                -drop,
                -B * rows(qd * ws),
                -B * rows(p * log_u * d),
                B * rows(qd * x * f["log_eta"]),
            ],
            axis=1,
        )
        return pred, jac_m

    @classmethod
    def _from_theta(cls, theta, unit, **options):
        L0, A, alpha, B, C, beta, gamma = (float(t) for t in theta)
        return cls(L0, A * unit**alpha, alpha, B / unit, C * unit ** (gamma - 1.0), beta, gamma)


# ----------------------------------------------------------------------------- fitting


@dataclasses.dataclass
class FitResult:
    """What a fit returns.

    Attributes:
        law: the fitted law (raw LR units).
        objective: the summed log-Huber objective at the optimum.
        r2: R² of the loss over every fitted point.
        mae, mape, rmse: per-curve errors on the fitted points (MAPE in percent).
        starts: how many starts were run (per λ); ``decay_objectives``: λ -> best objective.
        seconds: wall time of the fit.
    """

    law: Any
    objective: float
    r2: float
    mae: dict[str, float]
    mape: dict[str, float]
    rmse: dict[str, float]
    starts: int
    decay_objectives: dict[float, float]
    seconds: float


def _huber(r: np.ndarray, delta: float) -> tuple[float, np.ndarray]:
    small = np.abs(r) < delta
    value = np.where(small, 0.5 * r * r, delta * np.abs(r) - 0.5 * delta * delta)
    return float(value.sum()), np.clip(r, -delta, delta)


def _objective(theta, law_cls, feats, log_obs, delta, with_grad=True):
    # a wild trial point may overflow; the guard below turns that into the penalty, silently
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _objective_unguarded(theta, law_cls, feats, log_obs, delta, with_grad)


def _objective_unguarded(theta, law_cls, feats, log_obs, delta, with_grad):
    preds, jacs = [], []
    for f in feats:
        pred, jac = law_cls._predict_grad(theta, f)
        preds.append(pred)
        jacs.append(jac)
    pred = np.concatenate(preds)
    if not np.all(np.isfinite(pred)) or np.any(pred <= 0):
        return (PENALTY, np.zeros_like(theta)) if with_grad else PENALTY
    value, dr = _huber(log_obs - np.log(pred), delta)
    if not with_grad:
        return value
    grad = -(dr / pred) @ np.concatenate(jacs)
    if not np.all(np.isfinite(grad)):
        return PENALTY, np.zeros_like(theta)
    return value, grad


def _one_start(args):
    from scipy.optimize import minimize

    theta0, law_cls, feats, log_obs, delta, bounds, gradient = args
    # L-BFGS-B's own linear algebra is tiny: a multi-threaded BLAS only spins on it (40x slower
    # on a loaded two-core machine), so every start runs with one BLAS thread.
    with threadpool_limits(limits=1):
        return _minimize(minimize, theta0, law_cls, feats, log_obs, delta, bounds, gradient)


def _minimize(minimize, theta0, law_cls, feats, log_obs, delta, bounds, gradient):
    if gradient == "analytic":
        res = minimize(
            _objective,
            theta0,
            args=(law_cls, feats, log_obs, delta, True),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options=LBFGSB_OPTIONS,
        )
    else:
        res = minimize(
            _objective,
            theta0,
            args=(law_cls, feats, log_obs, delta, False),
            method="L-BFGS-B",
            bounds=bounds,
            options=LBFGSB_OPTIONS,
        )
    return float(res.fun), np.asarray(res.x, dtype=np.float64)


def _grid_points(law_cls, init_grid) -> np.ndarray:
    grid = law_cls.grid if init_grid is None else init_grid
    if not isinstance(grid, dict) or set(grid) != set(law_cls.params):
        raise ValueError(
            f"init_grid: expected a dict over {law_cls.params} for {law_cls.__name__}, got "
            f"{sorted(grid) if isinstance(grid, dict) else type(grid).__name__}"
        )
    axes = [np.asarray(grid[p], dtype=np.float64).ravel() for p in law_cls.params]
    if any(a.size == 0 or not np.all(np.isfinite(a)) for a in axes):
        raise ValueError("init_grid: every axis needs at least one finite value")
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)


def _fit_law(
    law_cls,
    curves,
    decay: float | str = DEFAULT_DECAY,
    huber_delta: float = 1e-3,
    init_grid: dict[str, Sequence[float]] | None = None,
    n_jobs: int = 1,
    gradient: str = "analytic",
    warmup: str = "as_peak",
    s1_include_step0: bool = True,
) -> FitResult:
    start_time = time.perf_counter()
    curves = _check_curves(curves)
    huber_delta = check_positive(huber_delta, "huber_delta")
    n_jobs = check_int(n_jobs, "n_jobs", 1)
    check_choice(gradient, "gradient", ("analytic", "finite"))
    check_choice(warmup, "warmup", WARMUP_MODES)
    if decay == "grid":
        decays = DECAY_GRID
    elif isinstance(decay, str):
        raise ValueError(f"decay: expected a number in [0, 1) or 'grid', got {decay!r}")
    else:
        decays = (check_decay(decay),)
    if law_cls is StepPowerLaw or law_cls is MultiPowerLaw:
        decays = decays[:1]  # these laws have no λ
    starts = _grid_points(law_cls, init_grid)
    unit = _unit(curves)
    step_unit = _S1_SCALE / max(float(c.steps[-1] + 1) for c in curves)
    bounds = [(0.0, None)] * len(law_cls.params)
    log_obs = np.log(np.concatenate([c.loss for c in curves]))

    best = None
    per_decay: dict[float, float] = {}
    for lam in decays:
        options = {"decay": lam, "warmup": warmup, "s1_include_step0": s1_include_step0}
        feat_options = dict(options, step_unit=step_unit)
        feats = [law_cls._features(c, unit, **feat_options) for c in curves]
        jobs = [(s, law_cls, feats, log_obs, huber_delta, bounds, gradient) for s in starts]
        if n_jobs == 1:
            outcomes = [_one_start(j) for j in jobs]
        else:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=n_jobs) as pool:
                outcomes = list(pool.map(_one_start, jobs))
        # the lowest objective; ties go to the earliest start, so n_jobs cannot change the answer
        i = min(range(len(outcomes)), key=lambda j: (outcomes[j][0], j))
        per_decay[lam] = outcomes[i][0]
        if best is None or outcomes[i][0] < best[0]:
            best = (outcomes[i][0], outcomes[i][1], options, feat_options)
    value, theta, options, feat_options = best
    if value >= PENALTY:
        raise RuntimeError(
            f"fit: every start of {law_cls.__name__} gave a non-positive prediction; pass an "
            "init_grid suited to these losses"
        )
    law = law_cls._from_theta(theta, unit, **feat_options)
    metrics = [evaluate(law, c) for c in curves]
    obs = np.concatenate([c.loss for c in curves])
    pred = np.concatenate([law.predict(c.lrs, c.steps, c.warmup_steps) for c in curves])
    r2 = 1.0 - float(np.sum((obs - pred) ** 2) / max(np.sum((obs - obs.mean()) ** 2), 1e-300))
    names = [c.name or f"curve{i}" for i, c in enumerate(curves)]
    return FitResult(
        law=law,
        objective=value,
        r2=r2,
        mae={n: m["mae"] for n, m in zip(names, metrics, strict=True)},
        mape={n: m["mape"] for n, m in zip(names, metrics, strict=True)},
        rmse={n: m["rmse"] for n, m in zip(names, metrics, strict=True)},
        starts=len(starts),
        decay_objectives=per_decay,
        seconds=time.perf_counter() - start_time,
    )


def fit(
    curves,
    decay: float | str = DEFAULT_DECAY,
    huber_delta: float = 1e-3,
    init_grid: dict[str, Sequence[float]] | None = None,
    n_jobs: int = 1,
    gradient: str = "analytic",
    warmup: str = "as_peak",
    s1_include_step0: bool = True,
) -> FitResult:
    """Fit :class:`LRAnnealingLaw` to one or more curves, as the reference script does.

    Objective: Σ over curves and points of Huber_δ(log L_obs − log L_pred), summed. Optimizer:
    ``scipy.optimize.minimize(method="L-BFGS-B")``, bounds [0, ∞) on (L₀, A, C, α), options
    maxiter 1e5, ftol 1e-9, gtol 1e-6 (eps 1e-8 for finite differences), one run per start of
    ``init_grid`` (default :data:`REFERENCE_GRID`, 54 starts), the best objective kept.

    Args:
        curves: a :class:`Curve` or a sequence of them (at least 5 points in all).
        decay: λ ∈ [0, 1), or ``"grid"`` to also scan :data:`DECAY_GRID` and keep the best.
        huber_delta: δ of the Huber loss on log-loss residuals.
        init_grid: {param: values} of the starts (a product grid).
        n_jobs: processes for the starts; the answer does not depend on it.
        gradient: ``"analytic"`` (exact gradient) or ``"finite"`` (scipy's finite differences,
            as the reference).
        warmup, s1_include_step0: the conventions of :func:`lrannealing.areas`.

    Returns:
        A :class:`FitResult`.
    """
    return _fit_law(
        LRAnnealingLaw,
        curves,
        decay,
        huber_delta,
        init_grid,
        n_jobs,
        gradient,
        warmup,
        s1_include_step0,
    )


def evaluate(law, curve: Curve) -> dict[str, float]:
    """Errors of ``law`` on ``curve``: MAE, MAPE (%), RMSE, R², and the final loss predicted/actual."""
    if not isinstance(law, _Law):
        raise TypeError(f"law: expected a fitted law, got {type(law).__name__}")
    if not isinstance(curve, Curve):
        raise TypeError(f"curve: expected a Curve, got {type(curve).__name__}")
    pred = law.predict(curve.lrs, curve.steps, curve.warmup_steps)
    err = pred - curve.loss
    ss_tot = float(np.sum((curve.loss - curve.loss.mean()) ** 2))
    return {
        "mae": float(np.mean(np.abs(err))),
        "mape": float(100.0 * np.mean(np.abs(err) / curve.loss)),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "r2": 1.0 - float(np.sum(err**2)) / ss_tot if ss_tot > 0 else float("nan"),
        "final_pred": float(pred[-1]),
        "final_actual": float(curve.loss[-1]),
    }
