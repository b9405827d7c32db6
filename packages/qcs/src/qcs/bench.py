"""The qcs benchmark suite (``neurips25 bench qcs``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache.

Cases: ``quality`` (the reduced reproduction, :mod:`qcs.experiment`), ``selection_cost`` (QCS's
policy work against one rollout; QCS against LESS feature extraction, CPU time and memory) and
``projection_speed``.
"""

from __future__ import annotations

import json
from collections import defaultdict

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="qcs",
    paper="Quadratic Coreset Selection: Certifying and Reconciling Sequence and Token Mining for Efficient Instruction Tuning",
    url="https://openreview.net/forum?id=btZm6DUaDO",
)


@SUITE.case("projection_speed", kind="speed")
def projection_speed(ctx: Context) -> None:
    """The per-step budget projection of ``t [n, T]``: exact sort (ours) vs PBCS-style bisection.

    Both project every row onto ``{Σ_j t_ij = α T_i, 0 ≤ t ≤ 1}`` with ragged lengths; outputs are
    checked equal (1e-5) before timing. Baseline: bisection (what PBCS does, here run to 1e-6).
    """
    import torch

    from .ops import project_capped_simplex

    n = ctx.pick(smoke=64, quick=2000, full=100_000)
    T = ctx.pick(smoke=32, quick=512, full=512)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]
    x = (0.5 + 0.3 * torch.randn(n, T, generator=g)) * mask
    total = 0.5 * lengths.float()
    fns = {
        "bisect (PBCS-style)": lambda: project_capped_simplex(x, total, mask=mask, method="bisect"),
        "sort (exact)": lambda: project_capped_simplex(x, total, mask=mask, method="sort"),
    }
    a, b = (f() for f in fns.values())
    err = float((a - b).abs().max())
    if not err <= 1e-5:
        raise AssertionError(f"sort and bisect projections differ by {err:.3e}")
    with single_thread():
        result = compare(
            fns,
            baseline="bisect (PBCS-style)",
            min_time=ctx.pick(smoke=0.01, quick=0.3, full=2.0),
            max_time=ctx.pick(smoke=2.0, quick=6.0, full=120.0),
        )
    result.record(ctx, n=n, T=T, max_abs_diff=float(f"{err:.3g}"))


# ----------------------------------------------------------------------------- quality


def _quality_sizes() -> dict:
    from .experiment import ARMS, QualitySize

    return {
        # 30 pairs, a 1-layer toy Llama, 2 outer iterations × K = 2: every arm end to end in seconds
        "smoke": dict(
            llama=dict(hidden_size=32, num_layers=1, num_heads=2),
            pretrain=dict(steps=30, batch_size=4, seq_len=64),
            size=QualitySize(
                n_pool=30,
                n_val=8,
                n_test=8,
                budgets=(0.1,),
                arms=ARMS,
                seeds=(0,),
                cheap_seeds=(0,),
                outer_steps=2,
                rollouts=2,
                rollout_steps=2,
                final_steps=2,
                batch_size=4,
                less_epochs=1,
                rho1_steps=2,
                max_new_bytes=4,
            ),
        ),
        # the issue's --quick: 5 %, random / DSIR / QCS, 10 outer iterations, one seed; sized to
        # ~30 s CPU on an empty cache (pretraining ~10 s of it): 5-step rollouts of batch 8
        "quick": dict(
            llama=dict(hidden_size=96, num_layers=4, num_heads=4),
            pretrain=dict(steps=60),
            size=QualitySize(
                n_pool=1000,
                n_val=32,
                n_test=200,
                budgets=(0.05,),
                arms=("random", "dsir", "qcs"),
                seeds=(0,),
                cheap_seeds=(0,),
                outer_steps=10,
                rollouts=4,
                rollout_steps=5,
                final_steps=40,
                batch_size=8,
                less_epochs=4,
                rho1_steps=50,
            ),
        ),
        # the documented reproduction: the scaled setting (100 outer x K=4 x 10 steps);
        # batch 8 keeps it near an hour of one core (estimate in the README)
        "full": dict(
            llama=dict(hidden_size=96, num_layers=4, num_heads=4),
            pretrain=dict(steps=600),
            size=QualitySize(
                n_pool=1000,
                n_val=32,
                n_test=1000,
                budgets=(0.05, 0.10),
                arms=ARMS,
                seeds=(0, 1, 2),
                cheap_seeds=(0, 1, 2, 3, 4),
                outer_steps=100,
                rollouts=4,
                rollout_steps=10,
                final_steps=100,
                batch_size=8,
                less_epochs=4,
                rho1_steps=50,
            ),
        ),
    }


@SUITE.case("quality", kind="quality")
def quality(ctx: Context) -> None:
    """Reduced reproduction: every arm selects from the same noisy pool, same final LoRA tune.

    Exact match on held-out addition + sorting (mean, 95 % t-interval over seeds); the headline
    baseline per budget is the strongest of random / perplexity / IFD / DSIR by validation loss;
    QCS's gap to it and to LESS with a paired-bootstrap interval over test examples.
    """
    import torch

    from neurips25_core.bench import plot_bars
    from neurips25_core.models import pretrained_tiny_llama, tiny_llama_config
    from neurips25_core.progress import progress_bar

    from .experiment import SIMPLE_ARMS, QualityExperiment, mean_ci, paired_bootstrap_diff
    from .peers import dsir_available

    spec = _quality_sizes()[ctx.mode]
    size = spec["size"]
    arms = list(size.arms)
    if "dsir" in arms and not dsir_available():
        arms.remove("dsir")
        ctx.log(
            "qcs/quality: DSIR arm skipped: data-selection (qcs's peers extra) is not installed "
            "(uv sync --all-packages --extra peers)"
        )
    with single_thread():
        base = pretrained_tiny_llama(
            config=tiny_llama_config(**spec["llama"]), progress=not ctx.smoke, **spec["pretrain"]
        )
        exp = QualityExperiment(base, size)
        runs = [
            (arm, frac, seed)
            for frac in size.budgets
            for arm in arms
            if not (arm == "full" and frac != size.budgets[0])  # full data: once
            for seed in size.seeds_for(arm)
        ]
        out: dict = defaultdict(list)
        for arm, frac, seed in progress_bar(runs, desc="qcs quality", enabled=not ctx.smoke):
            out[(arm, "all" if arm == "full" else frac)].append(exp.run_arm(arm, frac, seed))

    details = []
    for frac in size.budgets:
        m = size.budget_count(frac)
        simple = [a for a in SIMPLE_ARMS if (a, frac) in out]
        best = min(simple, key=lambda a: mean_ci(r.val_loss for r in out[(a, frac)])[0])
        best_em = mean_ci(r.exact_match for r in out[(best, frac)])[0]
        for arm in arms:
            if arm == "full" and frac != size.budgets[0]:
                continue  # one full-data run, recorded once
            key = (arm, "all" if arm == "full" else frac)
            rs = out[key]
            em, em_ci = mean_ci(r.exact_match for r in rs)
            loss, loss_ci = mean_ci(r.test_loss for r in rs)
            common = dict(budget=frac if arm != "full" else "all", arm=arm, seeds=len(rs))
            ctx.record(
                "exact_match",
                em,
                "frac",
                baseline=best,
                baseline_value=best_em,
                lower_is_better=False,
                **common,
                **({} if em_ci is None else {"ci95": round(em_ci, 4)}),
            )
            ctx.record(
                "test_loss",
                loss,
                "nats/byte",
                **common,
                **({} if loss_ci is None else {"ci95": round(loss_ci, 4)}),
            )
            ctx.record("val_loss", mean_ci(r.val_loss for r in rs)[0], "nats/byte", **common)
            ctx.record("wrong_kept", mean_ci(r.wrong_share for r in rs)[0], "frac", **common)
            ctx.record("filler_kept", mean_ci(r.filler_share for r in rs)[0], "frac", **common)
            ctx.record("selection_cpu", mean_ci(r.selection_seconds for r in rs)[0], "s", **common)
            for r in rs:
                details.append(
                    dict(
                        arm=arm,
                        budget=common["budget"],
                        m=m if arm != "full" else exp.n,
                        seed=r.seed,
                        exact_match=r.exact_match,
                        test_loss=r.test_loss,
                        val_loss=r.val_loss,
                        wrong_kept=r.wrong_share,
                        filler_kept=r.filler_share,
                        selection_cpu_s=r.selection_seconds,
                        **{k: v for k, v in r.extra.items() if k != "s"},
                    )
                )
        # QCS's gaps: paired over the seeds both arms ran, test examples resampled jointly
        for arm in ("qcs", "qcs_seq"):
            if (arm, frac) not in out:
                continue
            for other in dict.fromkeys((best, "less", "qcs_seq")):
                if other == arm or (other, frac) not in out:
                    continue
                mine = {r.seed: r for r in out[(arm, frac)]}
                theirs = {r.seed: r for r in out[(other, frac)]}
                seeds = sorted(set(mine) & set(theirs))
                a = torch.stack([mine[s].test_correct.float() for s in seeds])
                b = torch.stack([theirs[s].test_correct.float() for s in seeds])
                diff, lo, hi = paired_bootstrap_diff(a, b)
                ctx.record(
                    f"em_gap_vs_{other}",
                    diff,
                    "frac",
                    lower_is_better=False,
                    budget=frac,
                    arm=arm,
                    seeds=len(seeds),
                    ci_low=round(lo, 4),
                    ci_high=round(hi, 4),
                )
            # how far s moved from its start m/n: the histogram the issue asks for
            s = out[(arm, frac)][0].extra["s"]
            counts = torch.histc(s.float(), bins=10, min=0.0, max=1.0).tolist()
            ctx.record(
                "s_max_move", float((s - m / exp.n).abs().max()), "prob", budget=frac, arm=arm
            )
            details.append(dict(arm=arm, budget=frac, s_histogram_0_to_1=counts))
            if not ctx.smoke:
                plot_bars(
                    [f"{i / 10:.1f}" for i in range(10)],
                    {f"{arm} (seed {out[(arm, frac)][0].seed})": counts},
                    ctx.path(f"s_hist_{arm}_{frac}.png"),
                    ylabel="sequences",
                    title=f"s after selection, budget {frac:.0%} (start {m / exp.n:.3f})",
                    logy=True,
                )
    ctx.path("quality_runs.json").write_text(json.dumps(details, indent=1, default=float))
    if not ctx.smoke:
        labels = [a for a in arms if a != "full"]
        series = {
            f"{frac:.0%}": [mean_ci(r.exact_match for r in out[(a, frac)])[0] for a in labels]
            for frac in size.budgets
        }
        plot_bars(labels, series, ctx.path("exact_match.png"), ylabel="test exact match")


# ----------------------------------------------------------------------------- selection cost


@SUITE.case("selection_cost", kind="speed")
def selection_cost(ctx: Context) -> None:
    """QCS's cost: the policy step against one rollout, and a QCS selection against LESS's features.

    1. One policy step (sample K = 4 masks, the hierarchical REINFORCE gradient, the update and
       both budget projections) at ``n × T`` against one LoRA rollout (interleaved medians,
       ``bench.compare``; baseline: the rollout).
    2. A QCS selection (``outer`` steps × K rollouts) against LESS's selection (warm-up on a random
       5 %, Adam-preconditioned features of the pool and SGD features of the validation set over
       ``C`` checkpoints, matching) on the same pool and byte Llama: CPU seconds of one run each and
       the peak live tensor bytes (``bench.peak_live_bytes``; peak RSS of a fresh process in
       ``--full``). Both costs are linear in their loop counts, so per-unit costs are recorded
       with the totals projected to the issue's scale (n = 1,000, 100 outer × K = 4 × 10 steps,
       C = 4 checkpoints).
    """
    import time

    import torch

    from neurips25_core.bench import load_average, peak_live_bytes, peak_rss_subprocess
    from neurips25_core.models import tiny_llama, tiny_llama_config

    from .baselines import less_scores, less_selection
    from .less import less_features, less_warmup
    from .ops import HierarchicalBernoulliPolicy, QCSConfig, hierarchical_policy_gradient
    from .rollouts import LoRARollouts
    from .selector import QCSSelector
    from .tasks import encode_pairs, make_instruction_pool, make_target_set

    llama = ctx.pick(
        smoke=dict(hidden_size=32, num_layers=1, num_heads=2),
        quick=dict(hidden_size=96, num_layers=4, num_heads=4),
        full=dict(hidden_size=96, num_layers=4, num_heads=4),
    )
    n_pol = ctx.pick(smoke=1000, quick=10_000, full=100_000)
    T_pol = ctx.pick(smoke=32, quick=512, full=512)
    n = ctx.pick(smoke=40, quick=30, full=1000)
    outer = ctx.pick(smoke=2, quick=1, full=100)
    K, steps, batch = 4, ctx.pick(smoke=2, quick=10, full=10), ctx.pick(smoke=4, quick=16, full=16)
    epochs = ctx.pick(smoke=1, quick=2, full=4)
    budget = max(1, n // 20)
    with single_thread():
        # -- 1. policy step vs one rollout
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(1, T_pol + 1, (n_pol,), generator=g)
        pol = HierarchicalBernoulliPolicy(lengths, max(1, n_pol // 20), 0.5)
        F = torch.randn(K, generator=g, dtype=torch.float64)

        def policy_step():
            w, v = pol.sample(K, g)
            g_s, g_t = hierarchical_policy_gradient(F, w, v, pol.s, pol.t, pol.token_mask, "loo")
            pol.s.sub_(0.05 * g_s.to(pol.s.dtype).clamp(-1, 1))
            pol.t.sub_(0.05 * g_t.to(pol.t.dtype).clamp(-1, 1))
            pol.project_()

        model = tiny_llama(tiny_llama_config(**llama))  # random init: cost does not need training
        pool, val = make_instruction_pool(n, seed=0), make_target_set(32, seed=1)
        ro = LoRARollouts(model, pool, val, steps=steps, batch_size=batch)
        ones = torch.ones(ro.n, ro.max_tokens)
        result = compare(
            {"policy step": policy_step, "one rollout": lambda: ro.eval_fn(ro.train_fn(ones))},
            baseline="one rollout",
            min_time=ctx.pick(smoke=0.01, quick=0.3, full=2.0),
            max_time=ctx.pick(smoke=2.0, quick=3.0, full=60.0),
        )
        result.record(ctx, n=n_pol, T=T_pol, K=K, rollout_steps=steps, batch=batch)

        # -- 2. a QCS selection vs LESS's selection on the same pool
        cfg = QCSConfig(budget=budget, rollouts=K, outer_steps=outer, inner_steps=steps)
        val_enc = encode_pairs(val)
        subtask = torch.tensor([0 if p.family == "add" else 1 for p in val])

        def run_qcs():
            return QCSSelector(ro.train_fn, ro.eval_fn, cfg).fit(ro.pool).sequence_idx

        def run_less():
            warm = less_warmup(model, ro.pool, epochs=epochs, batch_size=batch, lr=1e-3)
            tr = less_features(warm, ro.pool, kind="adam")
            va = less_features(warm, val_enc, kind="sgd")
            return less_selection(less_scores(tr, va, warm.checkpoint_weights, subtask), budget)

        cost = {}
        for name, fn in (("qcs", run_qcs), ("less", run_less)):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            cost[name] = (time.process_time() - c0, time.perf_counter() - t0)
        # live tensor bytes need a second run of each (the dispatch mode slows it): not in --full,
        # which measures the peak RSS of a fresh process instead
        live = (
            {}
            if ctx.full
            else {name: peak_live_bytes(fn) for name, fn in (("qcs", run_qcs), ("less", run_less))}
        )
    load = load_average()
    load = None if load is None else round(load, 2)
    params = dict(n=n, outer=outer, K=K, rollout_steps=steps, checkpoints=epochs, load=load)
    ctx.record(
        "qcs_cpu", cost["qcs"][0], "s", baseline="less", baseline_value=cost["less"][0], **params
    )
    ctx.record(
        "qcs_wall", cost["qcs"][1], "s", baseline="less", baseline_value=cost["less"][1], **params
    )
    if live:
        ctx.record(
            "qcs_live_peak",
            live["qcs"],
            "B",
            baseline="less",
            baseline_value=live["less"],
            **params,
        )
    per_outer = cost["qcs"][0] / outer
    # LESS: C checkpoints × (pool + validation) single-example backwards dominate; warm-up is small
    per_example = cost["less"][0] / (epochs * (n + len(val)))
    proj = dict(n=1000, outer=100, K=4, rollout_steps=10, checkpoints=4)
    scale = 10 / steps
    ctx.record(
        "qcs_cpu_projected",
        per_outer * scale * 100,
        "s",
        baseline="less",
        baseline_value=per_example * 4 * (1000 + len(val)),
        **proj,
    )
    if ctx.full:
        setup = (
            "import torch\n"
            "from neurips25_core.models import tiny_llama, tiny_llama_config\n"
            "from qcs import QCSConfig, QCSSelector\n"
            "from qcs.less import less_warmup, less_features\n"
            "from qcs.rollouts import LoRARollouts\n"
            "from qcs.tasks import make_instruction_pool, make_target_set, encode_pairs\n"
            "torch.set_num_threads(1)\n"  # core-helper-ok: code string of a fresh process
            f"model = tiny_llama(tiny_llama_config(**{llama!r}))\n"
            f"pool, val = make_instruction_pool({n}), encode_pairs(make_target_set(32, seed=1))\n"
        )
        code_qcs = (
            f"ro = LoRARollouts(model, pool, val, steps={steps}, batch_size={batch})\n"
            f"QCSSelector(ro.train_fn, ro.eval_fn, QCSConfig(budget={budget}, rollouts={K}, "
            f"outer_steps=2, inner_steps={steps})).fit(ro.pool)\n"
        )
        code_less = (
            f"w = less_warmup(model, pool, epochs={epochs}, batch_size={batch}, lr=1e-3)\n"
            "less_features(w, pool, kind='adam'); less_features(w, val, kind='sgd')\n"
        )
        rss_q = peak_rss_subprocess(code_qcs, setup)["delta"]
        rss_l = peak_rss_subprocess(code_less, setup)["delta"]
        ctx.record("qcs_rss_delta", rss_q, "B", baseline="less", baseline_value=rss_l, **params)
