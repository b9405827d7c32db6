"""The cads benchmark suite (``neurips25 bench cads``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache. Everything runs
single-threaded (``single_thread``); times are process CPU seconds.

* ``digits_quality``: the vision reduced reproduction (``cads.experiment``): test accuracy per arm
  and budget, mean and 95 % t-interval over seeds, CADS-E minus the strongest simple baseline
  (the best static arm by validation accuracy, never test) and minus cleanlab (paired intervals),
  each selection's makeup by kind and its CPU time. smoke: 100 images, B = 5, every arm, 1 seed;
  quick: 1200 images, B in {25, 400}, full/random/cleanlab/CADS-E, 2 seeds; full: B in
  {25, 100, 400, 1600}, every arm, 5 seeds.
* ``language_quality``: test bits per byte on a held-out stdlib family (``cads.language``):
  CADS-S vs uniform, size-proportional, the best single source (by validation) and DSIR toward
  the target's validation text (``data-selection``, cads's ``peers`` extra; skipped with a message
  when absent); CADS-S minus the strongest static arm by validation and minus DSIR, paired.
* ``solver_speed``: CADS-E and ``BudgetedPBCS`` in one run on the same data: the solver CPU time
  until the deployed selection first reaches the validation loss both reach, and per outer step.
* ``policy_step``: one CADS-E policy step (sample K = 4, score, leave-one-out gradient, clipped
  Adam, capped-simplex projection) at n = 10^6 (10^4 in smoke mode).
"""

from __future__ import annotations

import time

from neurips25_core.bench import Context, Suite, plot_lines, single_thread, time_fn

SUITE = Suite(
    name="cads",
    paper="Computational Budget Should Be Considered in Data Selection",
    url="https://arxiv.org/abs/2510.16806",
)


def _cleanlab_available() -> bool:
    try:
        import cleanlab  # noqa: F401
    except ImportError:
        return False
    return True


@SUITE.case("digits_quality", kind="quality")
def digits_quality(ctx: Context) -> None:
    """Test accuracy per arm and budget on noisy digits; CADS-E vs the strongest simple baseline."""
    import torch

    from neurips25_core.progress import progress_bar

    from .digits import KINDS, mlp_factory, noisy_digits
    from .experiment import ARMS, STATIC, deploy, mean_ci, timed_select

    size = ctx.pick(
        smoke=dict(pool=100, val=50, test=100, budgets=[5], seeds=1, arms=ARMS),
        quick=dict(
            pool=1200,
            val=150,
            test=447,
            budgets=[25, 400],
            seeds=2,
            arms=("full", "random_10", "random_30", "random_50", "cleanlab", "cads_e"),
        ),
        full=dict(pool=1200, val=150, test=447, budgets=[25, 100, 400, 1600], seeds=5, arms=ARMS),
    )
    outer = ctx.pick(smoke=2, quick=30, full=60)
    pbcs_outer = ctx.pick(smoke=2, quick=40, full=40)
    score_steps = ctx.pick(smoke=10, quick=400, full=400)
    arms = list(size["arms"])
    if "cleanlab" in arms and not _cleanlab_available():
        ctx.log("cleanlab arm skipped: cleanlab is not installed (pip install 'cads[peers]')")
        arms.remove("cleanlab")
    data = noisy_digits(size["pool"], size["val"], size["test"])
    runs: dict[tuple[str, int], list[dict]] = {}
    cache: dict = {}
    tasks = [
        (b, seed, arm) for b in size["budgets"] for seed in range(size["seeds"]) for arm in arms
    ]
    with single_thread():
        for b, seed, arm in progress_bar(tasks, desc="cads digits", unit="arm"):
            factory = mlp_factory(seed)
            selection, seconds = timed_select(
                arm, factory, data, b, seed, outer, pbcs_outer, score_steps, cache
            )
            row = deploy(factory, data, selection, b, seed=10_000 + seed)
            row.update(seconds=seconds, makeup=data.makeup(selection))
            # examples the deployed training can draw from (source weights: every example)
            row["size"] = (
                int(selection.sum()) if selection.dtype == torch.bool else selection.numel()
            )
            if selection.is_floating_point():
                row["size"] = int(data.x.shape[0])
            runs.setdefault((arm, b), []).append(row)

    series: dict[str, list[float]] = {}
    errors: dict[str, list[float]] = {}
    for arm in arms:
        for b in size["budgets"]:
            rows = runs[(arm, b)]
            test, half = mean_ci([r["test_acc"] for r in rows])
            val, _ = mean_ci([r["val_acc"] for r in rows])
            makeup = {k: round(sum(r["makeup"][k] for r in rows) / len(rows), 3) for k in KINDS}
            ctx.record(
                "test_accuracy",
                test,
                "fraction",
                lower_is_better=False,
                arm=arm,
                budget=b,
                ci95=round(half, 4),
                val_accuracy=round(val, 4),
                seeds=len(rows),
                size=round(sum(r["size"] for r in rows) / len(rows), 1),
                selection_cpu_s=round(sum(r["seconds"] for r in rows) / len(rows), 3),
                **makeup,
            )
            series.setdefault(arm, []).append(test)
            errors.setdefault(arm, []).append(half)
    static = [a for a in arms if a in STATIC]
    for ours in ("cads_e", "cads_s", "pbcs"):
        if ours not in arms:
            continue
        for b in size["budgets"]:
            rivals = {}
            if static:
                best = max(static, key=lambda a: mean_ci([r["val_acc"] for r in runs[(a, b)]])[0])
                rivals[f"strongest static ({best})"] = best
            if "cleanlab" in arms:
                rivals["cleanlab"] = "cleanlab"
            for label, rival in rivals.items():
                diffs = [
                    o["test_acc"] - r["test_acc"]
                    for o, r in zip(runs[(ours, b)], runs[(rival, b)], strict=True)
                ]
                gap, half = mean_ci(diffs)
                ctx.record(
                    f"{ours}_minus_baseline",
                    gap,
                    "test accuracy",
                    baseline=label,
                    lower_is_better=False,
                    budget=b,
                    ci95=round(half, 4),
                    seeds=len(diffs),
                )
    plot_lines(
        size["budgets"],
        series,
        ctx.path("digits_quality.png"),
        xlabel="budget B (steps of 32)",
        ylabel="test accuracy",
        title="noisy digits: arm vs budget (mean, 95% t-interval)",
        logx=True,
        errors=errors,
    )


@SUITE.case("language_quality", kind="quality")
def language_quality(ctx: Context) -> None:
    """Test bits per byte on a held-out stdlib family: CADS-S vs uniform, size-proportional, the
    best single source and DSIR (the data-selection peer; skipped when absent)."""
    import json

    import torch

    from neurips25_core.dsir import dsir_available
    from neurips25_core.progress import progress_bar

    from .experiment import mean_ci
    from .language import (
        LANGUAGE_ARMS,
        byte_llama_factory,
        deploy_language,
        select_language,
        stdlib_families,
    )

    per_source = ctx.pick(smoke=2, quick=8, full=128)
    runs_of = ctx.pick(
        smoke=[(5, 1)],
        quick=[(20, 1)],
        full=[(100, 3), (400, 3), (1600, 1)],  # (budget, seeds)
    )
    outer = ctx.pick(smoke=2, quick=2, full=10)
    probe_steps = ctx.pick(smoke=1, quick=3, full=50)
    batch = 8
    data = stdlib_families(
        per_source=per_source,
        val_windows=ctx.pick(smoke=8, quick=32, full=64),
        test_windows=ctx.pick(smoke=16, quick=64, full=256),
    )
    arms = list(LANGUAGE_ARMS)
    if not dsir_available():
        ctx.log(
            "language quality: DSIR arm skipped: data-selection (cads's peers extra) is not "
            "installed (uv sync --all-packages --extra peers)"
        )
        arms.remove("dsir")
    tasks = [(b, seed, arm) for b, seeds in runs_of for seed in range(seeds) for arm in arms]
    rows: dict[tuple[str, int], list[dict]] = {}
    weights_of: dict[str, list[float]] = {}
    best_cache: dict = {}
    with single_thread():
        for b, seed, arm in progress_bar(tasks, desc="cads language", unit="arm"):
            factory = byte_llama_factory(seed)
            start = time.process_time()
            key = (seed, min(b, probe_steps))  # best_single depends on B only through this
            if arm == "best_single" and key in best_cache:
                weights, seconds = best_cache[key]
            else:
                weights = select_language(arm, factory, data, b, batch, seed, outer, probe_steps)
                seconds = time.process_time() - start
                if arm == "best_single":
                    best_cache[key] = (weights, seconds)
            row = deploy_language(factory, data, weights, b, batch, seed=10_000 + seed)
            row["seconds"] = seconds
            rows.setdefault((arm, b), []).append(row)
            if not weights.is_floating_point():  # DSIR's windows: the share of each source
                weights = torch.bincount(data.sources[weights], minlength=len(data.families))
                weights = weights.double()
            if arm in ("cads_s", "best_single", "dsir"):
                weights_of[f"{arm} B={b} seed={seed}"] = (weights / weights.sum()).tolist()
    for (arm, b), rs in rows.items():
        test, half = mean_ci([r["test_bpb"] for r in rs])
        val, _ = mean_ci([r["val_bpb"] for r in rs])
        ctx.record(
            "test_bits_per_byte",
            test,
            "bits/byte",
            arm=arm,
            budget=b,
            ci95=round(half, 4),
            val_bits_per_byte=round(val, 4),
            seeds=len(rs),
            target=data.target,
            selection_cpu_s=round(sum(r["seconds"] for r in rs) / len(rs), 2),
        )
    for b, _ in runs_of:
        static = [a for a in arms if a != "cads_s"]  # DSIR included: it also reads validation
        best = min(static, key=lambda a: mean_ci([r["val_bpb"] for r in rows[(a, b)]])[0])
        rivals = {f"strongest static ({best})": best}
        if "dsir" in arms:
            rivals["DSIR"] = "dsir"
        for label, rival in rivals.items():
            diffs = [
                o["test_bpb"] - r["test_bpb"]
                for o, r in zip(rows[("cads_s", b)], rows[(rival, b)], strict=True)
            ]
            gap, half = mean_ci(diffs)
            ctx.record(
                "cads_s_minus_baseline",
                gap,
                "test bits/byte",
                baseline=label,
                budget=b,
                ci95=round(half, 4),
                seeds=len(diffs),
            )
    ctx.path("language_weights.json").write_text(
        json.dumps({"families": list(data.families), "weights": weights_of}, indent=1)
    )


@SUITE.case("solver_speed", kind="speed")
def solver_speed(ctx: Context) -> None:
    """CPU time of CADS-E and BudgetedPBCS to the same deployed validation loss, one run."""
    import torch
    from torch import nn

    from .budget import Budget
    from .config import CADSConfig
    from .digits import mlp_factory, noisy_digits
    from .experiment import BATCH, deploy_mask
    from .outer import BudgetedPBCS, TrainingValue
    from .policies import BernoulliPolicy
    from .solver import CADS
    from .train import budgeted_train, default_optimizer

    pool = ctx.pick(smoke=100, quick=1200, full=1200)
    steps = ctx.pick(smoke=5, quick=100, full=400)
    cads_outer = ctx.pick(smoke=3, quick=20, full=60)
    pbcs_outer = ctx.pick(smoke=3, quick=10, full=30)
    every = ctx.pick(smoke=1, quick=5, full=5)
    data = noisy_digits(pool, 50 if ctx.smoke else 150, 100 if ctx.smoke else 447)
    factory = mlp_factory(0)
    budget = Budget(steps, BATCH)

    def deployed_val_loss(s: torch.Tensor) -> float:
        model, _ = budgeted_train(
            factory,
            data.train,
            deploy_mask(s),
            budget,
            default_optimizer,
            torch.Generator().manual_seed(10_000),
        )
        with torch.no_grad():
            return nn.functional.cross_entropy(model(data.val[0]), data.val[1]).item()

    def trace_of(run) -> list[tuple[float, float]]:
        trace: list[tuple[float, float]] = []
        spent = [0.0]  # CPU seconds inside the callback, excluded from the solver's time
        start = time.process_time()

        def callback(step: int, policy) -> None:
            if (step + 1) % every and step != 0:
                return
            t0 = time.process_time()
            solver_time = t0 - start - spent[0]
            trace.append((solver_time, deployed_val_loss(policy.s.detach().clone())))
            spent[0] += time.process_time() - t0

        run(callback)
        return trace

    with single_thread():
        cads_trace = trace_of(
            lambda cb: CADS(
                factory,
                nn.functional.cross_entropy,
                data.train,
                data.val,
                CADSConfig(budget, outer_steps=cads_outer),
            ).fit(torch.Generator().manual_seed(0), callback=cb)
        )
        value = TrainingValue(factory, nn.functional.cross_entropy, data.train, data.val, budget)
        pbcs_trace = trace_of(
            lambda cb: BudgetedPBCS(
                value, BernoulliPolicy(pool), outer_steps=pbcs_outer, rollouts=4
            ).fit(torch.Generator().manual_seed(0), callback=cb)
        )
    target = max(min(v for _, v in cads_trace), min(v for _, v in pbcs_trace))

    def time_to(trace: list[tuple[float, float]]) -> float:
        return next(t for t, v in trace if v <= target)

    ctx.record(
        "cpu_seconds_to_target",
        time_to(cads_trace),
        "s",
        baseline="BudgetedPBCS",
        baseline_value=time_to(pbcs_trace),
        target_val_loss=round(target, 4),
        budget=steps,
        pool=pool,
    )
    ctx.record(
        "cpu_seconds_per_outer_step",
        cads_trace[-1][0] / cads_outer,
        "s",
        baseline="BudgetedPBCS",
        baseline_value=pbcs_trace[-1][0] / pbcs_outer,
        budget=steps,
        pool=pool,
        rollouts=4,
        probe_fraction=0.2,
    )


@SUITE.case("policy_step", kind="speed")
def policy_step(ctx: Context) -> None:
    """One CADS-E policy step (K = 4, capped simplex) at n = 10^6."""
    import torch

    from .outer import PolicyOptimizer
    from .policies import BernoulliPolicy, policy_gradient

    n = ctx.pick(smoke=10_000, quick=1_000_000, full=1_000_000)
    policy = BernoulliPolicy(n, subset_size=n // 2)
    opt = PolicyOptimizer(policy, total_steps=10_000)
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        samples = policy.sample(4, gen)
        values = torch.randn(4, generator=gen, dtype=torch.float64)
        opt.step(policy_gradient(values, policy.score(samples)))

    with single_thread():
        timing = time_fn(step, warmup=1, min_time=ctx.pick(smoke=0.05, quick=1.0, full=3.0))
    ctx.record(
        "policy_step_time",
        timing.median,
        "s",
        n=n,
        rollouts=4,
        p20=timing.p20,
        p80=timing.p80,
        repeats=timing.repeats,
    )
