"""Fitters: power laws, the τ law from λ sweeps, and the critical batch from tokens-to-target.

Runs are records (mappings or objects with attributes) with the fields each fitter names; sizes
are in tokens. numpy does the linear fits, ``scipy.optimize.least_squares`` the nonlinear one.

Example (CPU):

    >>> import numpy as np
    >>> from hpscaling.fit import fit_power_law
    >>> x = np.array([1.0, 10.0, 100.0, 1000.0])
    >>> c, m, r2 = fit_power_law(x, 2.0 * x**-0.5)
    >>> round(c, 6), round(m, 6), round(r2, 6)
    (2.0, -0.5, 1.0)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "BCritFit",
    "SeededTauLawFit",
    "TauCell",
    "TauLawFit",
    "estimate_b_crit",
    "fit_power_law",
    "fit_tau_law",
    "fit_tau_law_seeds",
    "power_law_slope_ci",
    "remove_seed_offsets",
    "run_field",
]


def run_field(run: Any, name: str, index: int, argument: str = "runs") -> float:
    """Field ``name`` of one run record (a mapping or an object), checked to be a finite number."""
    if isinstance(run, Mapping):
        if name not in run:
            raise ValueError(f"{argument}[{index}]: missing field {name!r}")
        value = run[name]
    else:
        if not hasattr(run, name):
            raise ValueError(f"{argument}[{index}]: missing field {name!r}")
        value = getattr(run, name)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(
            f"{argument}[{index}].{name}: expected a number, got {type(value).__name__}"
        )
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{argument}[{index}].{name}: expected a finite number, got {value}")
    return value


def _positive_vector(name: str, values: Any) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected a 1-D sequence of numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name}: expected finite values > 0 (a power law is fitted in log space)")
    return arr


def fit_power_law(x: Any, y: Any, weights: Any = None) -> tuple[float, float, float]:
    """Weighted least squares of log y = log c + m·log x; returns ``(c, m, r2)``.

    Args:
        x, y: 1-D sequences of at least 3 positive values, at least 2 distinct ``x``.
        weights: optional non-negative weights per point (on the squared log residuals).

    Returns:
        ``c``, ``m`` and the weighted R² in log space.
    """
    xs = _positive_vector("x", x)
    ys = _positive_vector("y", y)
    if xs.shape != ys.shape:
        raise ValueError(f"y: expected {xs.shape[0]} values like x, got {ys.shape[0]}")
    if xs.shape[0] < 3:
        raise ValueError(f"x: a power-law fit needs at least 3 points, got {xs.shape[0]}")
    if np.unique(xs).shape[0] < 2:
        raise ValueError("x: a power-law fit needs at least 2 distinct x values")
    if weights is None:
        w = np.ones_like(xs)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != xs.shape or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(
                f"weights: expected {xs.shape[0]} finite values >= 0, not all zero, got {weights!r}"
            )
    lx, ly = np.log(xs), np.log(ys)
    design = np.stack([np.ones_like(lx), lx], axis=1)
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(design * sw[:, None], ly * sw, rcond=None)
    pred = design @ coef
    mean = np.sum(w * ly) / np.sum(w)
    total = np.sum(w * (ly - mean) ** 2)
    resid = np.sum(w * (ly - pred) ** 2)
    r2 = 1.0 - resid / total if total > 0 else 1.0
    return float(math.exp(coef[0])), float(coef[1]), float(r2)


@dataclasses.dataclass(frozen=True)
class TauCell:
    """One (N, D, B, η) cell of a λ sweep: its fitted λ_opt and the τ_opt it implies.

    ``lambda_opt``/``tau_opt`` (the quadratic's vertex) are None when the loss is not convex in
    log λ over the points used. ``extrapolated`` is True when the sweep does not bracket the
    optimum: the lowest loss is at the smallest or largest λ, or the vertex lies outside the
    fitted range. Such cells are left out of the laws.
    """

    N: float
    D: float
    B: float
    eta: float
    tpp: float
    lambda_opt: float | None
    tau_opt: float | None
    loss_opt: float | None
    best_lambda: float
    best_loss: float
    extrapolated: bool
    points: int


@dataclasses.dataclass(frozen=True)
class TauLawFit:
    """What :func:`fit_tau_law` found.

    Attributes:
        cells: one :class:`TauCell` per (N, D, B, η).
        c_tau, m_tau, r2: the τ_opt = c·TPP^m fit over the cells whose optimum lies inside the
            swept range (None with fewer than 3 such cells or a single TPP).
        law1: one entry per (N, D, η) with at least 2 batch sizes: ``{"N", "D", "eta", "slope",
            "B": [...], "lambda_opt": [...], "tau_opt": [...], "std_log_tau_opt",
            "std_log_lambda_opt"}``; ``slope`` is d log λ_opt / d log B (Law 1: 1), λ_opt rescaled
            to the group's mean D.
        notes: why cells or fits were left out.
    """

    cells: tuple[TauCell, ...]
    c_tau: float | None
    m_tau: float | None
    r2: float | None
    law1: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]


def _bowl(lams: np.ndarray, losses: np.ndarray, window: int | None):
    order = np.argsort(lams)
    lams, losses = lams[order], losses[order]
    if window is not None and lams.shape[0] > window:
        best = int(np.argmin(losses))
        start = min(max(0, best - window // 2), lams.shape[0] - window)
        lams, losses = lams[start : start + window], losses[start : start + window]
    x = np.log(lams)
    a, b, c = np.polyfit(x, losses, 2)
    if a <= 0:
        return None, None, lams
    x_opt = -b / (2 * a)
    return float(math.exp(x_opt)), float(c - b * b / (4 * a)), lams


def fit_tau_law(runs: Iterable[Any], window: int | None = 5, d_rtol: float = 0.02) -> TauLawFit:
    """Fit the τ law from λ sweeps: a quadratic in log λ per (N, D, B, η), then τ_opt against TPP.

    Args:
        runs: records with ``N``, ``D`` (tokens), ``B`` (tokens), ``eta``, ``lam`` and ``loss``.
            Runs with λ = 0 are ignored (τ = ∞). Each cell needs at least 3 distinct λ > 0.
        window: fit each bowl on at most this many λ values around the lowest loss (None: all);
            a quadratic describes a loss curve only near its minimum.
        d_rtol: cells whose D differ by at most this fraction share one D for Law 1 (runs of
            whole steps at different B cannot have exactly the same D).

    Returns:
        A :class:`TauLawFit`. A cell whose sweep does not bracket the optimum (lowest loss at
        either end, or the vertex outside the range) is kept, flagged ``extrapolated``, warned
        about and left out of the τ law and the Law-1 slopes.
    """
    if isinstance(d_rtol, bool) or not isinstance(d_rtol, (int, float)) or not 0 <= d_rtol < 1:
        raise ValueError(f"d_rtol: expected a number in [0, 1), got {d_rtol!r}")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 3
    ):
        raise ValueError(f"window: expected an int >= 3 or None, got {window!r}")
    records = list(runs) if not isinstance(runs, (str, bytes)) else None
    if records is None:
        raise TypeError("runs: expected an iterable of run records")
    groups: dict[tuple[float, float, float, float], list[tuple[float, float]]] = {}
    for i, run in enumerate(records):
        n, d, b, eta = (run_field(run, k, i) for k in ("N", "D", "B", "eta"))
        lam, loss = run_field(run, "lam", i), run_field(run, "loss", i)
        if min(n, d, b, eta) <= 0 or lam < 0:
            raise ValueError(f"runs[{i}]: N, D, B and eta must be > 0 and lam >= 0")
        if lam == 0:
            continue
        groups.setdefault((n, d, b, eta), []).append((lam, loss))
    if not groups:
        raise ValueError("runs: no run with lam > 0")
    cells: list[TauCell] = []
    notes: list[str] = []
    for (n, d, b, eta), pts in sorted(groups.items()):
        lams = np.array([p[0] for p in pts])
        losses = np.array([p[1] for p in pts])
        if np.unique(lams).shape[0] < 3:
            raise ValueError(
                f"runs: cell N={n:g}, D={d:g}, B={b:g} has {np.unique(lams).shape[0]} distinct "
                "lam > 0; a quadratic in log lam needs at least 3"
            )
        lam_opt, loss_opt, used = _bowl(lams, losses, window)
        best = int(np.argmin(losses))
        # Bracketed: the lowest loss is at an inner λ of the sweep and the vertex lies inside the
        # fitted range. A loss that keeps falling towards one end has no optimum in the sweep,
        # whatever vertex a quadratic through it happens to have.
        at_edge = lams[best] in (lams.min(), lams.max())
        outside = lam_opt is not None and not (used.min() <= lam_opt <= used.max())
        extrapolated = lam_opt is not None and (at_edge or outside)
        if lam_opt is None:
            notes.append(f"N={n:g}, D={d:g}, B={b:g}: loss not convex in log lam; left out")
        elif extrapolated:
            where = (
                f"the lowest loss is at the {'smallest' if lams[best] == lams.min() else 'largest'}"
                f" lam of the sweep ({lams[best]:.4g})"
                if at_edge
                else f"lambda_opt={lam_opt:.4g} lies outside [{used.min():.4g}, {used.max():.4g}]"
            )
            msg = f"N={n:g}, D={d:g}, B={b:g}: {where}: optimum not bracketed (extrapolated)"
            notes.append(msg)
            warnings.warn(f"fit_tau_law: {msg}", RuntimeWarning, stacklevel=2)
        cells.append(
            TauCell(
                N=n,
                D=d,
                B=b,
                eta=eta,
                tpp=d / n,
                lambda_opt=lam_opt,
                tau_opt=None if lam_opt is None else b / (eta * lam_opt * d),
                loss_opt=loss_opt,
                best_lambda=float(lams[best]),
                best_loss=float(losses[best]),
                extrapolated=bool(extrapolated),
                points=int(used.shape[0]),
            )
        )
    # A λ_opt outside the swept range is an extrapolation of a quadratic: kept in the cell, left
    # out of the laws.
    usable = [c for c in cells if c.tau_opt is not None and not c.extrapolated]
    c_tau = m_tau = r2 = None
    # distinct TPP: runs of whole steps at several B give TPPs a fraction of a percent apart,
    # which are one TPP (a power law through them would be noise)
    tpps = sorted(c.tpp for c in usable)
    n_tpp = 1 + sum(b > a * (1 + d_rtol) for a, b in itertools.pairwise(tpps)) if tpps else 0
    if len(usable) >= 3 and n_tpp >= 2:
        c_tau, m_tau, r2 = fit_power_law([c.tpp for c in usable], [c.tau_opt for c in usable])
    else:
        notes.append(
            "tau law: needs at least 3 cells with a bracketed optimum over at least 2 TPP values"
        )
    law1 = []
    # Law 1 compares batch sizes at one (N, D). Runs of a whole number of steps at different B
    # have D a fraction of a percent apart: cells within ``d_rtol`` count as one D, and λ_opt
    # (∝ 1/D at fixed τ) is rescaled to the group's mean D before the slope is taken.
    groups_nd: list[list[TauCell]] = []
    for c in sorted(usable, key=lambda c: (c.N, c.eta, c.D)):
        last = groups_nd[-1][0] if groups_nd else None
        if (
            last is not None
            and (last.N, last.eta) == (c.N, c.eta)
            and abs(c.D / last.D - 1) <= d_rtol
        ):
            groups_nd[-1].append(c)
        else:
            groups_nd.append([c])
    for group in groups_nd:
        if len({c.B for c in group}) < 2:
            continue
        group = sorted(group, key=lambda c: c.B)
        d_ref = float(np.exp(np.mean(np.log([c.D for c in group]))))
        lam_ref = [c.lambda_opt * c.D / d_ref for c in group]
        slope = float(np.polyfit(np.log([c.B for c in group]), np.log(lam_ref), 1)[0])
        law1.append(
            {
                "N": group[0].N,
                "D": d_ref,
                "eta": group[0].eta,
                "slope": slope,
                "B": [c.B for c in group],
                "lambda_opt": lam_ref,
                "tau_opt": [c.tau_opt for c in group],
                # the optimum's spread across B on each axis: Law 1 says τ_opt does not move
                "std_log_tau_opt": float(np.std(np.log([c.tau_opt for c in group]))),
                "std_log_lambda_opt": float(np.std(np.log(lam_ref))),
            }
        )
    return TauLawFit(tuple(cells), c_tau, m_tau, r2, tuple(law1), tuple(notes))


def power_law_slope_ci(x: Any, y: Any, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` confidence interval of the slope m of an unweighted log-log line fit.

    Student-t with n − 2 degrees of freedom on the residuals of log y = log c + m·log x; it
    assumes independent errors of equal size, so with few points it is wide (3 points: 1 dof).
    """
    from scipy.stats import t as student_t

    if isinstance(level, bool) or not isinstance(level, float) or not 0 < level < 1:
        raise ValueError(f"level: expected a float in (0, 1), got {level!r}")
    xs, ys = _positive_vector("x", x), _positive_vector("y", y)
    if xs.shape != ys.shape:
        raise ValueError(f"y: expected {xs.shape[0]} values like x, got {ys.shape[0]}")
    if xs.shape[0] < 3 or np.unique(xs).shape[0] < 2:
        raise ValueError("x: a slope interval needs at least 3 points and 2 distinct x values")
    lx, ly = np.log(xs), np.log(ys)
    m, b = np.polyfit(lx, ly, 1)
    dof = xs.shape[0] - 2
    s2 = float(np.sum((ly - (m * lx + b)) ** 2)) / dof
    se = math.sqrt(s2 / float(np.sum((lx - lx.mean()) ** 2)))
    half = float(student_t.ppf(0.5 + level / 2, dof)) * se
    return float(m - half), float(m + half)


@dataclasses.dataclass(frozen=True)
class SeededTauLawFit:
    """What :func:`fit_tau_law_seeds` found.

    Attributes:
        fit: :func:`fit_tau_law` on the seed-mean loss of every (N, D, B, η, λ) point.
        per_seed: ``{seed: TauLawFit}`` on each seed's runs alone (a seed that ran fewer than 3 λ
            in some cell only fits its other cells).
        seeds: how many seeds each point has: ``{(N, D, B, eta, lam): count}``.
        m_tau_ci: the ``level`` interval of m_τ over the seed bootstrap (None without a τ law).
        m_tau_regression_ci: the Student-t interval of m_τ's line fit through the cells.
        law1_ci: one ``(low, high)`` per entry of ``fit.law1``, over the bootstrap.
        tau_opt_ci: one ``(low, high)`` or None per cell of ``fit.cells``, over the bootstrap.
        boot_fits: how many bootstrap replicates gave a τ law (of ``n_boot``).
        n_boot: the number of bootstrap replicates.
    """

    fit: TauLawFit
    per_seed: dict[int, TauLawFit]
    seeds: dict[tuple[float, float, float, float, float], int]
    m_tau_ci: tuple[float, float] | None
    m_tau_regression_ci: tuple[float, float] | None
    law1_ci: tuple[tuple[float, float] | None, ...]
    tau_opt_ci: tuple[tuple[float, float] | None, ...]
    boot_fits: int
    n_boot: int


def remove_seed_offsets(points: dict) -> dict:
    """Each seed's losses minus its level in each (N, D, B, η) cell, relative to the cell's
    most-run seed (a seed sharing no λ with it is left as it is)."""
    by_cell: dict[tuple, list] = {}
    for key in points:
        by_cell.setdefault(key[:4], []).append(key)
    out = {k: dict(v) for k, v in points.items()}
    for keys in by_cell.values():
        counts: dict[int, int] = {}
        for k in keys:
            for seed in points[k]:
                counts[seed] = counts.get(seed, 0) + 1
        ref = min(counts, key=lambda s: (-counts[s], s))
        for seed in counts:
            if seed == ref:
                continue
            diffs = [
                points[k][seed] - points[k][ref] for k in keys if {seed, ref} <= set(points[k])
            ]
            if diffs:
                offset = float(np.mean(diffs))
                for k in keys:
                    if seed in out[k]:
                        out[k][seed] = points[k][seed] - offset
    return out


def fit_tau_law_seeds(
    runs: Iterable[Any],
    n_boot: int = 200,
    level: float = 0.95,
    rng_seed: int = 0,
    window: int | None = 5,
    d_rtol: float = 0.02,
    seed_offsets: bool = True,
) -> SeededTauLawFit:
    """:func:`fit_tau_law` over repeated seeds, with the seed noise of every fitted number.

    The central fit uses the mean loss over the seeds of each (N, D, B, η, λ) point. The
    bootstrap redraws, at every point, its seeds' losses with replacement and refits; the
    intervals are the percentiles of what it gives. A point run with one seed is held fixed in
    every replicate, so its noise is not counted: run the points near each optimum with ≥ 2 seeds.

    Args:
        runs: records like :func:`fit_tau_law`'s, plus an int ``seed`` (default 0).
        n_boot: bootstrap replicates (>= 10).
        level: the interval's coverage, in (0, 1).
        rng_seed: the bootstrap's random seed.
        window, d_rtol: passed to :func:`fit_tau_law`.
        seed_offsets: first subtract each seed's level in each cell (its mean difference from
            the cell's most-run seed over the λ both ran). A seed's initialisation shifts its
            whole curve; where only some λ have extra seeds, a plain mean would mix levels and
            move the minimum towards the λ that happen to have fewer seeds.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 10:
        raise ValueError(f"n_boot: expected an int >= 10, got {n_boot!r}")
    if isinstance(level, bool) or not isinstance(level, float) or not 0 < level < 1:
        raise ValueError(f"level: expected a float in (0, 1), got {level!r}")
    if isinstance(runs, (str, bytes)):
        raise TypeError("runs: expected an iterable of run records")
    points: dict[tuple[float, float, float, float, float], dict[int, float]] = {}
    for i, run in enumerate(runs):
        key = tuple(run_field(run, k, i) for k in ("N", "D", "B", "eta", "lam"))
        loss = run_field(run, "loss", i)
        has_seed = (isinstance(run, Mapping) and "seed" in run) or hasattr(run, "seed")
        seed = run_field(run, "seed", i) if has_seed else 0.0
        if seed != int(seed):
            raise ValueError(f"runs[{i}].seed: expected an integer, got {seed}")
        if int(seed) in points.setdefault(key, {}):
            raise ValueError(f"runs[{i}]: a second run of seed {int(seed)} at the same point")
        points[key][int(seed)] = loss
    if not points:
        raise ValueError("runs: no runs")

    def records(losses: dict) -> list[dict[str, float]]:
        return [
            {"N": k[0], "D": k[1], "B": k[2], "eta": k[3], "lam": k[4], "loss": v}
            for k, v in losses.items()
        ]

    def quiet_fit(recs: list[dict[str, float]]) -> TauLawFit:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return fit_tau_law(recs, window=window, d_rtol=d_rtol)

    if seed_offsets:
        points = remove_seed_offsets(points)
    fit = fit_tau_law(
        records({k: float(np.mean(list(v.values()))) for k, v in points.items()}),
        window=window,
        d_rtol=d_rtol,
    )
    per_seed = {}
    for seed in sorted({s for v in points.values() for s in v}):
        mine = {k: v[seed] for k, v in points.items() if seed in v}
        by_cell: dict[tuple[float, ...], list] = {}
        for k in mine:
            by_cell.setdefault(k[:4], []).append(k)
        kept = {k: mine[k] for ks in by_cell.values() if len({k[4] for k in ks}) >= 3 for k in ks}
        if kept:
            per_seed[seed] = quiet_fit(records(kept))
    rng = np.random.default_rng(rng_seed)
    keys = list(points)
    arrays = [np.array(list(points[k].values())) for k in keys]
    m_boot: list[float] = []
    law1_boot: list[list[float]] = [[] for _ in fit.law1]
    tau_boot: list[list[float]] = [[] for _ in fit.cells]
    cell_index = {(c.N, c.D, c.B, c.eta): j for j, c in enumerate(fit.cells)}
    law1_index = {(e["N"], tuple(e["B"])): j for j, e in enumerate(fit.law1)}
    for _ in range(n_boot):
        draw = {
            k: float(a.mean() if a.shape[0] == 1 else rng.choice(a, a.shape[0]).mean())
            for k, a in zip(keys, arrays, strict=True)
        }
        rep = quiet_fit(records(draw))
        if rep.m_tau is not None:
            m_boot.append(rep.m_tau)
        for c in rep.cells:
            j = cell_index.get((c.N, c.D, c.B, c.eta))
            if j is not None and c.tau_opt is not None and not c.extrapolated:
                tau_boot[j].append(c.tau_opt)
        for e in rep.law1:
            j = law1_index.get((e["N"], tuple(e["B"])))
            if j is not None:
                law1_boot[j].append(e["slope"])
    lo, hi = 50 * (1 - level), 50 * (1 + level)

    def interval(values: list[float], need: int) -> tuple[float, float] | None:
        if len(values) < need:
            return None
        return float(np.percentile(values, lo)), float(np.percentile(values, hi))

    # an interval only when most replicates gave the number (else it describes the few that did)
    need = max(2, n_boot // 2)
    regression_ci = None
    usable = [c for c in fit.cells if c.tau_opt is not None and not c.extrapolated]
    if fit.m_tau is not None:
        regression_ci = power_law_slope_ci(
            [c.tpp for c in usable], [c.tau_opt for c in usable], level
        )
    return SeededTauLawFit(
        fit=fit,
        per_seed=per_seed,
        seeds={k: len(v) for k, v in points.items()},
        m_tau_ci=interval(m_boot, need) if fit.m_tau is not None else None,
        m_tau_regression_ci=regression_ci,
        law1_ci=tuple(interval(v, need) for v in law1_boot),
        tau_opt_ci=tuple(interval(v, need) for v in tau_boot),
        boot_fits=len(m_boot),
        n_boot=n_boot,
    )


@dataclasses.dataclass(frozen=True)
class BCritFit:
    """D(B) = D_min·(1 + B/B_crit) fitted to tokens-to-target; ``points`` are the (B, D) used."""

    B_crit: float
    D_min: float
    target_loss: float
    points: tuple[tuple[float, float], ...]
    notes: tuple[str, ...]


def estimate_b_crit(runs: Iterable[Any], target_loss: float) -> BCritFit:
    """The critical batch from the tokens each batch size needs to reach ``target_loss``.

    For each B, the tokens-to-target are interpolated (in log D against log loss) between the
    runs that bracket the target; then D(B) = D_min·(1 + B/B_crit) is fitted in log space with
    ``scipy.optimize.least_squares``.

    Args:
        runs: records with ``B`` (tokens), ``D`` (tokens) and ``loss`` (the final loss of a run of D
            tokens at batch B, λ tuned per run as in the paper). Losses must be > 0.
        target_loss: the loss level (> 0); at least 3 batch sizes must bracket it.

    Returns:
        A :class:`BCritFit`.
    """
    from scipy.optimize import least_squares

    if isinstance(target_loss, bool) or not isinstance(target_loss, (int, float)):
        raise TypeError(f"target_loss: expected a number, got {type(target_loss).__name__}")
    if not (math.isfinite(target_loss) and target_loss > 0):
        raise ValueError(f"target_loss: expected a finite number > 0, got {target_loss!r}")
    if isinstance(runs, (str, bytes)):
        raise TypeError("runs: expected an iterable of run records")
    by_b: dict[float, list[tuple[float, float]]] = {}
    for i, run in enumerate(runs):
        b, d, loss = (run_field(run, k, i) for k in ("B", "D", "loss"))
        if b <= 0 or d <= 0 or loss <= 0:
            raise ValueError(f"runs[{i}]: B, D and loss must be > 0")
        by_b.setdefault(b, []).append((d, loss))
    points: list[tuple[float, float]] = []
    notes: list[str] = []
    for b, pts in sorted(by_b.items()):
        pts.sort()
        ds = np.log([p[0] for p in pts])
        ls = np.log([p[1] for p in pts])
        target = math.log(target_loss)
        found = None
        for j in range(len(pts) - 1):
            lo, hi = ls[j], ls[j + 1]
            if (lo - target) * (hi - target) <= 0 and lo != hi:
                found = ds[j] + (target - lo) * (ds[j + 1] - ds[j]) / (hi - lo)
                break
        if found is None:
            notes.append(f"B={b:g}: the runs do not bracket target_loss={target_loss:g}; left out")
        else:
            points.append((b, float(math.exp(found))))
    if len(points) < 3:
        raise ValueError(
            f"runs: only {len(points)} batch sizes reach target_loss={target_loss:g}; "
            "fitting D(B) = D_min(1 + B/B_crit) needs at least 3"
        )
    bs = np.array([p[0] for p in points])
    ds = np.log([p[1] for p in points])

    def residual(theta: np.ndarray) -> np.ndarray:
        log_dmin, log_bcrit = theta
        return log_dmin + np.log1p(bs / math.exp(log_bcrit)) - ds

    start = np.array([ds.min(), math.log(float(np.median(bs)))])
    sol = least_squares(residual, start, method="lm")
    return BCritFit(
        B_crit=float(math.exp(sol.x[1])),
        D_min=float(math.exp(sol.x[0])),
        target_loss=float(target_loss),
        points=tuple(points),
        notes=tuple(notes),
    )
