"""The diloco benchmark suite (``neurips25 bench diloco``).

* ``quality``: the reduced reproduction. Real gloo runs (M processes for DiLoCo, DDP on two
  processes for DP, torchft's DiLoCo at M = 2) of tiny Llamas on the stdlib corpus at D = 20N,
  then the paper's fits made from them: A·N^α per algorithm, the joint A·N^α·M^β, γ*(N),
  leave-one-out on the largest size, the parametric forms 1–4, loss versus batch and the H
  ablation.
* ``speed``: bytes all-reduced per token (DiLoCo: 1/H of DP's), time per H steps of DP, ours and
  torchft on two gloo processes (CPU, ratios), and the idealized wall-clock model for the three
  networks.

Modes: ``smoke`` (two widths <= 16, one layer, 10 steps, H = 5: the fits run end to end on real
runs), ``quick`` (hidden 24, D = 5N, H = 10: DP, M = 1, M = 2 and torchft), ``full`` (the ladder
16/24/32 at D ≈ 20N with the sweeps described in the README). T is rounded to a multiple of H so
that no inner steps are dropped at the end (the engine, like the paper, does no final sync).
"""

from __future__ import annotations

import json
import math
from typing import Any

from neurips25_core.bench import Context, Suite, compare, plot_lines

SUITE = Suite(
    name="diloco",
    paper="Communication-Efficient Language Model Training Scales Reliably and Robustly: Scaling Laws for DiLoCo",
    url="https://arxiv.org/abs/2503.09799",
)

#: The width of the H ablation (the issue asks for 32; 24 keeps the full run near 45 min here).
H_ABLATION_WIDTH = 24


def _label(algo: str, replicas: int) -> str:
    return "DP" if algo == "dp" else ("torchft M=2" if algo == "torchft" else f"M={replicas}")


class _Runs:
    """Runs specs once each (in order), with a progress bar; remembers every result."""

    def __init__(self, ctx: Context, planned: int) -> None:
        from neurips25_core.progress import progress_bar

        self.ctx = ctx
        self.results: dict[Any, dict[str, Any]] = {}
        self.bar = progress_bar(total=planned, desc="diloco runs", leave=False)

    def __call__(self, spec) -> dict[str, Any]:
        from diloco.training import run

        if spec not in self.results:
            out = run(spec)
            self.results[spec] = out
            self.bar.update(1)
            self.bar.set_postfix(
                last=f"{spec.algo} h{spec.hidden} M{spec.replicas} {out['val_loss']:.3f}"
            )
        return self.results[spec]

    def close(self) -> None:
        self.bar.close()


@SUITE.case("quality", kind="quality")
def quality(ctx: Context) -> None:
    """Table 4-style losses (DP vs DiLoCo M = 1, 2, 4 and torchft) and the scaling-law fits."""
    import dataclasses

    from diloco.peer import torchft_available
    from diloco.training import RunSpec

    ft_ok, ft_why = torchft_available()
    if not ft_ok:
        ctx.log(f"torchft arm skipped: {ft_why}")
    # The ladder is 16/24/32/48; hidden 48 cost 60% of the previous full run's time and
    # is dropped so the run fits this round's CPU budget (README, "What was trimmed").
    widths = ctx.pick(smoke=(8, 16), quick=(24,), full=(16, 24, 32))
    layers = ctx.pick(smoke=1, quick=2, full=2)
    sync_every = ctx.pick(smoke=5, quick=10, full=30)
    base = RunSpec(
        layers=layers,
        sync_every=sync_every,
        batch=32,
        inner_lr=1.13e-2,
        tokens_per_param=ctx.pick(smoke=20.0, quick=5.0, full=20.0),
        steps=ctx.pick(smoke=10, quick=None, full=None),
        steps_multiple=sync_every,
        eval_batches=ctx.pick(smoke=1, quick=4, full=16),
    )
    # γ grids (powers of √2). A pilot at hidden 16 (D = 20N, B = 32) put DP's best γ at 1.6e-2 and
    # M = 2's at 8e-3 on {4e-3, 8e-3, 1.6e-2, 3.2e-2}; the full run gives DP and M = 2 the same
    # budget (two values each, around their own pilot optimum), M = 1 inherits DP's best γ and
    # M = 4 inherits M = 2's (one run each): trimmed from the issue's three values to fit two cores.
    gammas_dp = ctx.pick(smoke=(1.13e-2,), quick=(1.13e-2,), full=(1.13e-2, 1.6e-2))
    gammas_m2 = ctx.pick(smoke=(1.13e-2,), quick=(1.13e-2,), full=(8e-3, 1.13e-2))
    replicas_list = ctx.pick(smoke=(1, 2), quick=(1, 2), full=(1, 2, 4))
    planned = len(widths) * (len(gammas_dp) + len(gammas_m2) + len(replicas_list) - 1) + 20
    runs = _Runs(ctx, planned)

    def spec(algo: str, hidden: int, replicas: int = 2, **kw: Any) -> RunSpec:
        return dataclasses.replace(base, algo=algo, hidden=hidden, replicas=replicas, **kw)

    def loss(s: RunSpec) -> float:
        return runs(s)["val_loss"]

    best: dict[tuple[str, int], RunSpec] = {}  # (label, hidden) -> best spec at seed 0
    try:
        for h in widths:
            best[("DP", h)] = min((spec("dp", h, inner_lr=g) for g in gammas_dp), key=loss)
            best[("M=2", h)] = min((spec("diloco", h, 2, inner_lr=g) for g in gammas_m2), key=loss)
            for m in replicas_list:
                if m != 2:
                    g = best[("DP", h)].inner_lr if m == 1 else best[("M=2", h)].inner_lr
                    best[(f"M={m}", h)] = spec("diloco", h, m, inner_lr=g)
                    loss(best[(f"M={m}", h)])
            if ft_ok and (ctx.mode == "quick" or (ctx.mode == "full" and h <= 24)):
                s = dataclasses.replace(best[("M=2", h)], algo="torchft")
                loss(s)
                best[("torchft M=2", h)] = s
        # Loss versus batch at the best γ (DP and M = 2): same tokens, so T scales as 1/B.
        batches = ctx.pick(smoke=(), quick=(), full=(16, 64))
        batch_widths = [h for h in widths if h <= 24]
        for h in batch_widths:
            for lab in ("DP", "M=2"):
                for b in batches:
                    loss(dataclasses.replace(best[(lab, h)], batch=b))
        # H ablation at hidden 24 (the issue asks for 32: trimmed for time), M = 2, best γ.
        h_abl = ctx.pick(smoke=(), quick=(), full=(1, 5, 10, 30, 100))
        for H in h_abl:
            loss(dataclasses.replace(best[("M=2", H_ABLATION_WIDTH)], sync_every=H))
        # A second seed at the best cells.
        seed_labels = ctx.pick(smoke=(), quick=(), full=("DP", "M=2"))
        seed_widths = ctx.pick(smoke=(), quick=(), full=(16, 24))
        for h in seed_widths:
            for lab in seed_labels:
                loss(dataclasses.replace(best[(lab, h)], seed=1))
    finally:
        runs.close()
    _report_quality(
        ctx,
        runs.results,
        best,
        widths,
        replicas_list,
        seed_labels,
        seed_widths,
        h_abl,
        batches,
        batch_widths,
    )


def _report_quality(
    ctx,
    results,
    best,
    widths,
    replicas_list,
    seed_labels,
    seed_widths,
    h_abl,
    batches,
    batch_widths,
):
    import dataclasses

    from diloco import scaling

    def val(s) -> float:
        return results[s]["val_loss"]

    n_of = {h: results[best[("DP", h)]]["parameters"] for h in widths}
    labels = (
        ["DP"]
        + [f"M={m}" for m in replicas_list]
        + (["torchft M=2"] if any(k[0] == "torchft M=2" for k in best) else [])
    )
    # Every run, against the best DP at its size.
    for s, out in results.items():
        lab = _label(s.algo, s.replicas)
        dp = val(best[("DP", s.hidden)])
        ctx.record(
            "val_loss",
            out["val_loss"],
            "nats/byte",
            baseline=None
            if (lab == "DP" and s == best[("DP", s.hidden)])
            else "DP (best γ, B=32, seed 0)",
            baseline_value=None if (lab == "DP" and s == best[("DP", s.hidden)]) else dp,
            algo=lab,
            hidden=s.hidden,
            N=out["parameters"],
            gamma=round(s.inner_lr, 6),
            B=s.batch,
            H=s.sync_every,
            seed=s.seed,
            T=out["steps"],
            outer_steps=out["outer_steps"],
            best=best.get((lab, s.hidden)) == s,
        )
    # Seed spread.
    spread = {}
    for h in seed_widths:
        for lab in seed_labels:
            s0 = best[(lab, h)]
            spread[(lab, h)] = abs(val(s0) - val(dataclasses.replace(s0, seed=1)))
    worst_spread = max(spread.values()) if spread else float("nan")
    lines = ["| N (hidden) | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for h in widths:
        dp = val(best[("DP", h)])
        cells = []
        for lab in labels:
            if (lab, h) not in best:
                cells.append("")
                continue
            v = val(best[(lab, h)])
            pct = "" if lab == "DP" else f" ({100 * (v - dp) / dp:+.2f}%)"
            sd = spread.get((lab, h))
            sp = f" ±{sd:.3f}" if sd is not None else ""
            cells.append(f"{v:.4f}{pct}{sp}")
        lines.append(f"| {n_of[h]:,} ({h}) | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    # Fits from the runs (best cell per size, seed 0).
    sizes = [n_of[h] for h in widths]
    fits: dict[str, Any] = {
        "independent": {},
        "leave_one_out": {},
        "inner_lr": {},
        "joint": None,
        "parametric": {},
    }
    can_fit = len(widths) >= 2  # quick mode trains one size: nothing to fit
    for lab in ["DP"] + [f"M={m}" for m in replicas_list]:
        if not can_fit:
            break
        ls = [val(best[(lab, h)]) for h in widths]
        gs = [best[(lab, h)].inner_lr for h in widths]
        fits["independent"][lab] = scaling.fit_power_law(sizes, ls)
        fits["inner_lr"][lab] = scaling.fit_power_law(sizes, gs)
        if len(widths) >= 3:
            fits["leave_one_out"][lab] = scaling.leave_one_out(sizes, ls)["residual"]
    jn, jm, jl = [], [], []
    for m in replicas_list:
        for h in widths:
            jn.append(n_of[h])
            jm.append(m)
            jl.append(val(best[(f"M={m}", h)]))
    if can_fit:
        fits["joint"] = scaling.fit_joint_power_law(jn, jm, jl)
    if len(widths) >= 3:
        fits["joint_leave_one_out"] = scaling.leave_one_out(jn, jl, M=jm)["residual"]
    n_starts = ctx.pick(smoke=2, quick=4, full=64)  # the paper: 256 (time, see README)
    if len(widths) >= 3:
        for form in (1, 2, 3, 4):
            try:
                r = scaling.fit_parametric(jn, jm, jl, form, n_starts=n_starts)
                fits["parametric"][form] = {
                    "params": r["params"],
                    "holdout_residual": r["holdout_residual"],
                }
            except (ValueError, RuntimeError) as exc:
                fits["parametric"][form] = {"error": str(exc)}
    for lab, (a, alpha) in fits["independent"].items():
        ctx.record(
            "fit_alpha",
            alpha,
            "",
            baseline=None,
            lower_is_better=True,
            algo=lab,
            A=round(a, 4),
            loo_residual=fits["leave_one_out"].get(lab),
        )
    if fits["joint"] is not None:
        a, alpha, beta = fits["joint"]
        ctx.record(
            "fit_joint_beta",
            beta,
            "",
            algo="joint M",
            A=round(a, 4),
            alpha=round(alpha, 5),
            loo_residual=fits.get("joint_leave_one_out"),
            paper_beta=scaling.PAPER["table10"]["loss"][2],
        )
    # Loss versus batch and the H ablation.
    batch_rows = {}
    for h in batch_widths:
        for lab in ("DP", "M=2"):
            row = {}
            for b in sorted({32, *batches}):
                s = dataclasses.replace(best[(lab, h)], batch=b)
                if s in results:
                    row[b] = val(s)
            batch_rows[f"{lab} h{h}"] = row
    vertices = {}
    for key, row in batch_rows.items():
        if len(row) >= 3:
            vertices[key] = 2 ** scaling.batch_vertex(
                [math.log2(b) for b in row], list(row.values())
            )
    h_rows = {}
    for H in h_abl:
        s = dataclasses.replace(best[("M=2", H_ABLATION_WIDTH)], sync_every=H)
        h_rows[H] = val(s)
        ctx.record(
            "h_ablation_val_loss",
            val(s),
            "nats/byte",
            baseline="DP (best γ, B=32, seed 0)",
            baseline_value=val(best[("DP", H_ABLATION_WIDTH)]),
            algo="M=2",
            hidden=H_ABLATION_WIDTH,
            H=H,
        )
    # Orderings the paper expects.
    orders = {}
    for h in widths:
        v = {lab: val(best[(lab, h)]) for lab in ["DP"] + [f"M={m}" for m in replicas_list]}
        orders[h] = " < ".join(sorted(v, key=v.get))
    summary = {
        "table": table,
        "seed_spread_max": worst_spread,
        "seed_spread": {f"{k[0]} h{k[1]}": d for k, d in spread.items()},
        "sizes": dict(zip(map(str, widths), sizes, strict=True)),
        "fits": {
            k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
            for k, v in fits.items()
        },
        "paper": {
            "table7": {str(k): v for k, v in scaling.PAPER["table7"].items()},
            "table10_loss": scaling.PAPER["table10"]["loss"],
        },
        "loss_vs_batch": {k: {str(b): x for b, x in r.items()} for k, r in batch_rows.items()},
        "batch_vertex": vertices,
        "h_ablation": {str(k): v for k, v in h_rows.items()},
        "orderings": {str(k): v for k, v in orders.items()},
        "runs": [
            {**dataclasses.asdict(s), **{k: v for k, v in out.items() if k != "train_losses"}}
            for s, out in results.items()
        ],
    }
    ctx.path("quality.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    md = [
        f"# diloco quality ({ctx.mode})",
        "",
        "Best validation loss (nats/byte) per size; % vs DP; ± = |seed 0 − seed 1|.",
        "",
        table,
        "",
    ]
    md.append(f"Largest seed spread: {worst_spread:.4f} nats/byte.\n")
    md.append(
        "Orderings (lowest loss first): "
        + "; ".join(f"h{h}: {o}" for h, o in orders.items())
        + "\n"
    )
    md.append("| fit | ours (A, α) | LOO residual | paper Table 7 (A, α) |\n|---|---|---|---|")
    for lab, (a, alpha) in fits["independent"].items():
        key = "DP" if lab == "DP" else int(lab[2:])
        loo = fits["leave_one_out"].get(lab)
        md.append(
            f"| {lab} | ({a:.4g}, {alpha:.4f}) | {'' if loo is None else f'{loo:.4f}'} | {scaling.PAPER['table7'][key]} |"
        )
    if fits["joint"] is not None:
        a, alpha, beta = fits["joint"]
        loo = fits.get("joint_leave_one_out")
        md.append(
            f"| joint | ({a:.4g}, {alpha:.4f}, β={beta:.4f}) | {'' if loo is None else f'{loo:.4f}'} | Table 10 {scaling.PAPER['table10']['loss']} |\n"
        )
    md.append(
        "γ*(N) fits (A, α): "
        + "; ".join(f"{k}: ({a:.3g}, {b:.3f})" for k, (a, b) in fits["inner_lr"].items())
        + "\n"
    )
    if fits["parametric"]:
        md.append(
            "Parametric forms (held-out residual at the largest size): "
            + "; ".join(
                f"form {f}: {r.get('holdout_residual', r.get('error'))}"
                for f, r in fits["parametric"].items()
            )
            + "\n"
        )
    if batch_rows and batches:
        md.append(
            "Loss vs global batch (sequences): "
            + "; ".join(
                f"{k}: " + ", ".join(f"B={b}: {x:.4f}" for b, x in sorted(r.items()))
                for k, r in batch_rows.items()
            )
            + "\n"
        )
    if h_rows:
        md.append(
            f"H ablation (hidden {H_ABLATION_WIDTH}, M=2): "
            + ", ".join(f"H={k}: {v:.4f}" for k, v in h_rows.items())
            + "\n"
        )
    ctx.path("quality.md").write_text("\n".join(md) + "\n")
    if len(widths) >= 2:
        plot_lines(
            sizes,
            {
                lab: [val(best[(lab, h)]) for h in widths]
                for lab in labels
                if all((lab, h) in best for h in widths)
            },
            ctx.path("loss_vs_N.png"),
            xlabel="parameters N",
            ylabel="validation loss (nats/byte)",
            title="DiLoCo vs DP (best γ per cell)",
            logx=True,
            logy=True,
        )
    if batch_rows and batches:
        bs = sorted({32, *batches})
        series = {k: [r[b] for b in bs] for k, r in batch_rows.items() if all(b in r for b in bs)}
        if series:
            plot_lines(
                bs,
                series,
                ctx.path("loss_vs_batch.png"),
                xlabel="global batch (sequences)",
                ylabel="validation loss (nats/byte)",
                title="Loss vs batch at the best γ",
                logx=True,
            )
    ctx.log("\n".join(md))


def _speed_rank(
    rank: int, world: int, hidden: int, sync_every: int, rounds: int, ft_address: str | None
):
    """Per rank: time H steps of DDP, of ours (inner steps + outer step) and of torchft."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from diloco.engine import DiLoCo, DiLoCoConfig, split_global_batch
    from diloco.models import ladder_config, lm_loss
    from diloco.training import RunSpec
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import tiny_llama

    corpus = stdlib_corpus()
    cfg = ladder_config(hidden, 2)
    gen = torch.Generator().manual_seed(0)
    x, y = split_global_batch(corpus.get_batch("train", 32, 128, generator=gen), rank, world)

    def make():
        m = tiny_llama(cfg, seed=0)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.99))

    dp_model, dp_opt = make()
    ddp = DistributedDataParallel(dp_model)
    our_model, our_opt = make()
    ours = DiLoCo(our_model, our_opt, DiLoCoConfig(sync_every=sync_every, final_sync=False))
    fns = {}

    def steps(model, opt, after=None):
        def fn():
            for _ in range(sync_every):
                loss = lm_loss(model, x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if after is not None:
                    after()

        return fn

    fns["DP (DDP AdamW)"] = steps(ddp, dp_opt)
    fns["ours"] = steps(our_model, our_opt, ours.step)
    ft = None
    if ft_address is not None:
        from diloco.peer import torchft_diloco

        ft_model, ft_opt = make()
        ft = torchft_diloco(
            ft_model,
            ft_opt,
            RunSpec(algo="torchft", hidden=hidden, replicas=world, sync_every=sync_every),
            rank,
            world,
            {"lighthouse": ft_address},
        )
        fns["torchft"] = steps(ft_model, ft_opt)
    try:
        result = compare(fns, baseline="DP (DDP AdamW)", rounds=rounds, warmup=1)
        sync_time = compare({"ours sync": ours.sync}, rounds=rounds, warmup=0)
    finally:
        if ft is not None:
            ft.close()
    return {
        "timings": {k: (t.median, t.p20, t.p80) for k, t in result.timings.items()},
        "load": (result.load_start, result.load_end),
        "rounds": result.rounds,
        "sync": sync_time.timings["ours sync"].median,
    }


@SUITE.case("speed", kind="speed")
def speed(ctx: Context) -> None:
    """Bytes all-reduced per token, time per H steps (DP vs ours vs torchft, 2 gloo ranks), wallclock()."""
    import dataclasses

    from diloco import scaling
    from diloco.engine import run_replicas
    from diloco.peer import start_lighthouse, torchft_available
    from diloco.training import RunSpec, run

    hidden = ctx.pick(smoke=8, quick=24, full=32)
    sync_every = ctx.pick(smoke=5, quick=10, full=30)
    steps = ctx.pick(smoke=10, quick=20, full=90)
    base = RunSpec(
        hidden=hidden, layers=2, sync_every=sync_every, batch=32, steps=steps, eval_batches=1
    )
    dp = run(dataclasses.replace(base, algo="dp"))
    ours = run(dataclasses.replace(base, algo="diloco", replicas=2))
    per_token_dp = dp["bytes_all_reduced"] / dp["tokens"]
    per_token_ours = ours["bytes_all_reduced"] / ours["tokens"]
    ctx.record(
        "allreduce_bytes_per_token",
        per_token_ours,
        "B/token",
        baseline="DP (DDP)",
        baseline_value=per_token_dp,
        hidden=hidden,
        H=sync_every,
        steps=steps,
        impl="ours M=2",
    )
    ctx.record(
        "allreduce_bytes_per_token",
        per_token_dp,
        "B/token",
        hidden=hidden,
        steps=steps,
        impl="DP (DDP)",
    )

    ft_ok, ft_why = torchft_available()
    if not ft_ok:
        ctx.log(f"torchft timing skipped: {ft_why}")
    lighthouse = start_lighthouse(2) if ft_ok else None
    try:
        rounds = ctx.pick(smoke=2, quick=2, full=5)
        per_rank = run_replicas(
            _speed_rank,
            2,
            args=(hidden, sync_every, rounds, lighthouse.address() if lighthouse else None),
        )
    finally:
        if lighthouse is not None:
            lighthouse.shutdown()
    r0 = per_rank[0]
    load = f"{r0['load'][0]}->{r0['load'][1]}"
    dp_t = r0["timings"]["DP (DDP AdamW)"][0]
    for name, (med, p20, p80) in r0["timings"].items():
        is_base = name == "DP (DDP AdamW)"
        ctx.record(
            "time_per_H_steps",
            med,
            "s",
            baseline=None if is_base else "DP (DDP AdamW)",
            baseline_value=None if is_base else dp_t,
            impl=name,
            hidden=hidden,
            H=sync_every,
            p20=round(p20, 4),
            p80=round(p80, 4),
            rounds=r0["rounds"],
            load=load,
            ranks=2,
        )
    ctx.record(
        "outer_step_time",
        r0["sync"],
        "s",
        impl="ours sync (all-reduce + Nesterov)",
        hidden=hidden,
        ranks=2,
        load=load,
    )
    # The idealized wall-clock model (App. A) at 2.4B, D = 20N, B = 2^20 tokens.
    n, d, b = 2.4e9, 20 * 2.4e9, 2**20
    for net in scaling.NETWORKS:
        w_dp = scaling.wallclock(n, d, b, "dp", network=net)
        for H in (30, 100):
            w = scaling.wallclock(n, d, b, "diloco", M=2, H=H, network=net)
            ctx.record(
                "wallclock_idealized",
                w["total"],
                "s",
                baseline="DP",
                baseline_value=w_dp["total"],
                network=net,
                M=2,
                H=H,
                N=n,
                cross_bytes_ratio=round(w_dp["cross_bytes"] / w["cross_bytes"], 1),
            )
