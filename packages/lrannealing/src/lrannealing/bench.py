"""The lrannealing benchmark suite (``neurips25 bench lrannealing``).

Quality cases fit every law on constant + cosine runs and predict held-out schedules:

- ``toy_quadratic``: the exact expected loss of SGD on a noisy power-law quadratic (seconds);
- ``tiny_lm``: the reduced reproduction, real tiny-Llama runs on the stdlib corpus, cached.

Every law gets the same fit: summed log-Huber (δ = 1e-3), L-BFGS-B with the reference options,
a product grid of starts (54 for the law and for MultiPowerLaw, the same grid without C, 18, for
the three-parameter baselines) and the same points. Speed cases: S₂ by a Python loop, lfilter and
the torch chunked scan; the 54-start fit with finite differences and with the analytic gradient.
"""

from __future__ import annotations

import json
import time

import numpy as np

from lrannealing import reference, schedules
from lrannealing.areas import DEFAULT_DECAY, areas, s2_torch
from lrannealing.law import (
    REFERENCE_GRID,
    Curve,
    ForwardOnlyLaw,
    LRAnnealingLaw,
    MultiPowerLaw,
    StepPowerLaw,
    evaluate,
)
from lrannealing.search import optimize_schedule
from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="lrannealing",
    paper="Scaling Law with Learning Rate Annealing",
    url="https://arxiv.org/abs/2408.11029",
)

#: The laws of every comparison: label -> (class, fit keyword arguments).
LAWS = {
    "law λ=0.999": (LRAnnealingLaw, {"decay": DEFAULT_DECAY}),
    "law λ=grid": (LRAnnealingLaw, {"decay": "grid"}),
    "MultiPowerLaw": (MultiPowerLaw, {}),
    "ForwardOnlyLaw": (ForwardOnlyLaw, {}),
    "StepPowerLaw": (StepPowerLaw, {}),
}
BASELINE = "ForwardOnlyLaw"
#: Smoke mode fits from 4 starts per law (seconds on a loaded machine); quick and full use the
#: full grids (54 / 54 / 18 / 18 starts).
SMOKE_GRIDS = {
    LRAnnealingLaw: {"L0": (0.1, 2.1), "A": (1.0,), "C": (1.0,), "alpha": (0.4, 0.8)},
    ForwardOnlyLaw: {"L0": (0.1, 2.1), "A": (1.0,), "alpha": (0.4, 0.8)},
    StepPowerLaw: {"L0": (0.1, 2.1), "A": (1.0,), "alpha": (0.4, 0.8)},
    MultiPowerLaw: {
        "L0": (0.1, 2.1),
        "A": (1.0,),
        "alpha": (0.2, 0.5),
        "B": (50.0,),
        "C": (2.0,),
        "beta": (0.5,),
        "gamma": (0.5,),
    },
}


def _fit_all(ctx: Context, fit_curves: list[Curve]) -> dict[str, object]:
    fits = {}
    for label, (cls, kwargs) in LAWS.items():
        start = time.perf_counter()
        grid = SMOKE_GRIDS[cls] if ctx.smoke else None
        fits[label] = cls.fit(fit_curves, init_grid=grid, **kwargs)
        ctx.log(
            f"{ctx.case}: fitted {label} in {time.perf_counter() - start:.1f} s: {fits[label].law}"
        )
    return fits


def _record_heldout(ctx: Context, fits, held_out: list[Curve], **params) -> dict:
    table = {}
    for label, result in fits.items():
        ctx.record("fit_r2", result.r2, "", lower_is_better=False, law=label, **params)
        for curve in held_out:
            m = evaluate(result.law, curve)
            table.setdefault(curve.name, {})[label] = m
    for name, row in table.items():
        base = row[BASELINE]
        for label, m in row.items():
            is_base = label == BASELINE
            for metric, unit in (("mape", "%"), ("mae", "nats")):
                ctx.record(
                    f"heldout_{metric}",
                    m[metric],
                    unit,
                    baseline=None if is_base else BASELINE,
                    baseline_value=None if is_base else base[metric],
                    schedule=name,
                    law=label,
                    **params,
                )
            ctx.record(
                "heldout_r2", m["r2"], "", lower_is_better=False, schedule=name, law=label, **params
            )
    return table


def _ranking(ctx: Context, fits, curves: list[Curve], **params) -> dict:
    actual = {c.name: float(c.loss[-1]) for c in curves}
    order = sorted(actual, key=actual.get)
    out = {"actual": order}
    for label, result in fits.items():
        pred = {
            c.name: float(result.law.predict(c.lrs, [c.steps[-1]], c.warmup_steps)[0])
            for c in curves
        }
        p_order = sorted(pred, key=pred.get)
        out[label] = p_order
        ctx.record(
            "final_ranking_match",
            float(p_order == order),
            "bool",
            lower_is_better=False,
            law=label,
            predicted=">".join(reversed(p_order)),
            actual=">".join(reversed(order)),
            **params,
        )
    return out


def _plot(ctx: Context, fits, curves: list[Curve], fitted: set[str], name: str, title: str) -> None:
    from neurips25_core.bench import _plt

    plt = _plt()
    labels = list(fits)
    fig, axes = plt.subplots(1, len(labels), figsize=(4.2 * len(labels), 3.8), dpi=110, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    tail = min(float(c.loss[len(c.loss) // 3 :].min()) for c in curves)
    top = max(float(c.loss[len(c.loss) // 3 :].max()) for c in curves)
    for ax, label in zip(np.atleast_1d(axes), labels, strict=True):
        law = fits[label].law
        for color, c in zip(colors, curves, strict=False):
            steps = np.arange(c.steps[0], c.steps[-1] + 1)
            style = "--" if c.name in fitted else "-"
            ax.plot(c.steps, c.loss, "o", ms=2.5, color=color, alpha=0.6)
            ax.plot(
                steps,
                law.predict(c.lrs, steps, c.warmup_steps),
                style,
                color=color,
                lw=1.2,
                label=c.name + (" (fit)" if c.name in fitted else ""),
            )
        mapes = [evaluate(law, c)["mape"] for c in curves if c.name not in fitted]
        ax.set_title(f"{label}\nheld-out MAPE {np.mean(mapes):.2f}%", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(tail - 0.05 * (top - tail), top + 0.05 * (top - tail))
        ax.grid(True, alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("loss")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(title + " — dots: measured, lines: predicted (dashed: fitted)", fontsize=10)
    fig.tight_layout()
    fig.savefig(ctx.path(name))
    plt.close(fig)


def _dump(ctx: Context, name: str, curves: list[Curve], fits, extra: dict | None = None) -> None:
    data = {
        "curves": {
            c.name: {
                "steps": c.steps.tolist(),
                "loss": c.loss.tolist(),
                "warmup_steps": c.warmup_steps,
            }
            for c in curves
        },
        "laws": {label: r.law.to_dict() for label, r in fits.items()},
        "fit_seconds": {label: r.seconds for label, r in fits.items()},
        **(extra or {}),
    }
    ctx.path(name).write_text(json.dumps(data, indent=1, default=str) + "\n")


# ----------------------------------------------------------------------------- quality


@SUITE.case("toy_quadratic", kind="quality")
def toy_quadratic(ctx: Context) -> None:
    """Noisy quadratic (exact expected SGD loss): fit constant + cosine, predict WSD, 8-1-1, cyclic."""
    from lrannealing.experiment import noisy_quadratic_curve

    T = ctx.pick(smoke=400, quick=1000, full=3000)
    every = ctx.pick(smoke=25, quick=50, full=50)
    peak = 0.5
    sched = {
        "constant": schedules.constant(T, peak),
        "cosine": schedules.cosine(T, peak),
        "wsd": schedules.wsd(T, peak, decay_frac=0.2),
        "8-1-1": schedules.multistep(T, peak),
        "cyclic": schedules.cyclic(T, peak, cycles=2, min_lr=0.1 * peak),
    }
    steps = np.arange(max(every, int(0.05 * T)), T + 1, every)
    sims = {n: noisy_quadratic_curve(lrs) for n, lrs in sched.items()}
    curves = [
        Curve(steps, sims[n][steps], lrs, name=n, source="expected") for n, lrs in sched.items()
    ]
    fit_curves, held_out = curves[:2], curves[2:]
    fits = _fit_all(ctx, fit_curves)
    _record_heldout(ctx, fits, held_out, T=T)
    _ranking(ctx, fits, curves, T=T)
    # schedule search: the WSD the fitted law likes best, run for real against cosine
    best = optimize_schedule(
        fits["law λ=0.999"].law, T, peak, family="wsd", min_lr_ratios=(0.0, 0.1)
    )
    actual = float(noisy_quadratic_curve(best.lrs)[-1])
    ctx.record(
        "searched_wsd_final_loss",
        actual,
        "loss",
        baseline="cosine",
        baseline_value=float(sims["cosine"][-1]),
        predicted=round(best.final_loss, 4),
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in best.params.items()},
    )
    _plot(ctx, fits, curves, {"constant", "cosine"}, "toy_fit.png", f"noisy quadratic, T={T}")
    _dump(ctx, "toy_curves.json", curves, fits)


def lm_setup(mode: str) -> dict:
    """The tiny-Llama reproduction's sizes per mode (``full`` is the issue's configuration)."""
    from neurips25_core.models import tiny_llama_config

    if mode == "smoke":
        cfg = dict(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=128)
        run = dict(T=40, warmup=4, batch_size=2, seq_len=32, eval_every=8, eval_sequences=8)
        names = ("constant", "cosine", "wsd_cos20")
    elif mode == "quick":
        cfg = dict(hidden_size=32, num_layers=2, num_heads=2, max_position_embeddings=128)
        run = dict(T=600, warmup=20, batch_size=8, seq_len=64, eval_every=50, eval_sequences=64)
        names = ("constant", "cosine", "wsd_cos20")
    else:
        cfg = dict(hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=128)
        run = dict(T=3000, warmup=100, batch_size=8, seq_len=128, eval_every=50, eval_sequences=64)
        names = ("constant", "cosine", "wsd_cos20", "wsd_lin10", "8-1-1")
    T, peak, w = run["T"], 3e-3, run["warmup"]
    every = {
        "constant": schedules.constant(T, peak, warmup=w),
        "cosine": schedules.cosine(T, peak, warmup=w),
        "wsd_cos20": schedules.wsd(T, peak, decay_frac=0.2, shape="cosine", warmup=w),
        "wsd_lin10": schedules.wsd(T, peak, decay_frac=0.1, shape="linear", warmup=w),
        "8-1-1": schedules.multistep(T, peak, warmup=w),
    }
    return {
        "config": tiny_llama_config(**cfg),
        "run": run,
        "schedules": {n: every[n] for n in names},
    }


@SUITE.case("tiny_lm", kind="quality")
def tiny_lm(ctx: Context) -> None:
    """Tiny Llama on the stdlib corpus: fit constant + cosine, predict the WSD / 8-1-1 runs."""
    from lrannealing.experiment import lm_curve
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import tiny_llama

    setup = lm_setup(ctx.mode)
    run = setup["run"]
    corpus = stdlib_corpus()
    curves, seconds = [], {}
    # one thread: a width-16..64 model is all synchronisation, several times faster single-threaded
    with single_thread():
        for name, lrs in setup["schedules"].items():
            curve, meta = lm_curve(
                name,
                lrs,
                run["warmup"],
                setup["config"],
                corpus,
                steps=run["T"],
                batch_size=run["batch_size"],
                seq_len=run["seq_len"],
                eval_every=run["eval_every"],
                eval_sequences=run["eval_sequences"],
                progress=not ctx.smoke,
            )
            curves.append(curve)
            seconds[name] = meta["seconds"]
            how = "cached" if meta["cached"] else f"{meta['seconds']:.0f} s"
            ctx.log(f"tiny_lm: {name}: final val loss {curve.loss[-1]:.4f} ({how})")
    start = max(run["warmup"], int(0.05 * run["T"]))
    fit_points = [c.after(start) for c in curves]
    fits = _fit_all(ctx, fit_points[:2])
    n_params = sum(p.numel() for p in tiny_llama(setup["config"]).parameters())
    params = {"T": run["T"], "params_M": round(n_params / 1e6, 3)}
    table = _record_heldout(ctx, fits, fit_points[2:], **params)
    ranking = _ranking(ctx, fits, fit_points, **params)
    _plot(ctx, fits, fit_points, {"constant", "cosine"}, "lm_fit.png", f"tiny Llama, T={run['T']}")
    _dump(
        ctx,
        "lm_curves.json",
        fit_points,
        fits,
        {
            "heldout": table,
            "ranking": ranking,
            "train_seconds": seconds,
            "grid_objectives": {str(k): v for k, v in fits["law λ=grid"].decay_objectives.items()},
        },
    )


# ----------------------------------------------------------------------------- speed


@SUITE.case("s2_speed", kind="speed")
def s2_speed(ctx: Context) -> None:
    """S₂ at T steps: the Python recursion (baseline) vs scipy lfilter vs the torch chunked scan."""
    import torch

    sizes = ctx.pick(smoke=[1_000], quick=[10_000, 100_000], full=[10_000, 100_000, 1_000_000])
    for T in sizes:
        lrs = schedules.wsd(T - 1, 3e-3, decay_frac=0.2) * (
            1 + 0.1 * np.random.default_rng(0).random(T)
        )
        t_lrs = torch.from_numpy(lrs)
        ref = reference.s2_recursion(lrs, DEFAULT_DECAY)
        for name, out in (("lfilter", areas(lrs)[1]), ("torch_scan", s2_torch(t_lrs).numpy())):
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            if err > 1e-10:
                raise AssertionError(
                    f"s2_speed: {name} differs from the recursion by {err:.2e} at T={T}"
                )
        with single_thread():
            result = compare(
                {
                    "python_loop": lambda lrs=lrs: reference.s2_recursion(lrs, DEFAULT_DECAY),
                    "lfilter": lambda lrs=lrs: areas(lrs),
                    "torch_scan": lambda t=t_lrs: s2_torch(t),
                },
                baseline="python_loop",
                min_time=ctx.pick(smoke=0.01, quick=0.1, full=0.5),
                max_rounds=ctx.pick(smoke=3, quick=5, full=10),
                min_rounds=ctx.pick(smoke=1, quick=3, full=3),
            )
        result.record(ctx, T=T)


@SUITE.case("fit_speed", kind="speed")
def fit_speed(ctx: Context) -> None:
    """54-start fit of 2 curves × 20 points (the reference's setting): finite differences vs analytic."""
    from lrannealing.law import fit

    T = 20_000
    truth = LRAnnealingLaw(L0=2.5, A=0.4, C=1.5, alpha=0.45)
    steps = np.arange(1000, T + 1, 1000)
    rng = np.random.default_rng(0)
    curves = []
    for name, lrs in (
        ("constant", schedules.constant(T, 2e-4)),
        ("cosine", schedules.cosine(T, 2e-4)),
    ):
        loss = truth.predict(lrs, steps) * (1 + 0.002 * rng.standard_normal(steps.size))
        curves.append(Curve(steps, loss, lrs, name=name))
    # smoke: 4 starts (seconds); quick: 18 (the reference grid at alpha = 0.4: the ratio is per
    # start, and the finite-difference fit alone takes ~15 s at 54); full: the reference's 54
    grid = ctx.pick(
        smoke={"L0": (0.1, 2.1), "A": (1.0,), "C": (1.0,), "alpha": (0.4, 0.8)},
        quick={**REFERENCE_GRID, "alpha": (0.4,)},
        full=None,
    )
    out = {}

    def run(gradient):
        out[gradient] = fit(curves, gradient=gradient, init_grid=grid)

    result = compare(
        {"finite": lambda: run("finite"), "analytic": lambda: run("analytic")},
        baseline="finite",
        rounds=ctx.pick(smoke=1, quick=1, full=3),
        warmup=0,
    )
    finite, analytic = out["finite"], out["analytic"]
    gap = abs(finite.objective - analytic.objective) / analytic.objective
    if gap > 1e-3:
        raise AssertionError(f"fit_speed: the two fits disagree (objective gap {gap:.2e})")
    ctx.record(
        "fit_objective_gap", gap, "relative", finite=finite.objective, analytic=analytic.objective
    )
    result.record(ctx, starts=analytic.starts, points=int(steps.size * 2))
