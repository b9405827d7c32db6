"""The completep benchmark suite (``neurips25 bench completep``).

A: LR transfer across depth (reduced reproduction: real training on the stdlib byte corpus),
B: coordinate check across depth, speed: step time of plain vs hooked Llama vs Granite.
Every case sizes itself with ``ctx.pick``; the workspace tests run each in smoke mode.
"""

from __future__ import annotations

import json
import math

from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread

SUITE = Suite(
    name="completep",
    paper="Don't be lazy: CompleteP enables compute-efficient deep transformers",
    url="https://arxiv.org/abs/2505.01618",
)


def _base_config(width: int, heads: int, ffn: int, seq: int):
    from neurips25_core.models import tiny_llama_config

    return tiny_llama_config(
        hidden_size=width,
        num_layers=2,
        num_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=seq,
    )


def _model(base_config, width: int, depth: int, cfg, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    from completep import parameterize, scaled_config

    torch.manual_seed(seed)
    model = LlamaForCausalLM(scaled_config(base_config, width, depth))
    parameterize(model, cfg, generator=torch.Generator().manual_seed(seed))
    return model


def _mup_available() -> bool:
    try:
        import mup  # noqa: F401
    except ImportError:
        return False
    return True


def _linear_decay(steps: int, warmup: int, final: float = 0.1):
    """LR factor: linear warm-up over ``warmup`` steps, then linear decay to ``final`` (issue 27)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 1.0 - (1.0 - final) * min(1.0, (step - warmup) / max(1, steps - warmup))

    return factor


def _hidden_weights(model) -> list[list]:
    """Per decoder layer, its seven hidden matrices (q, k, v, o, gate, up, down)."""
    return [
        [getattr(layer.self_attn, n).weight for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
        + [getattr(layer.mlp, n).weight for n in ("gate_proj", "up_proj", "down_proj")]
        for layer in model.model.layers
    ]


def _train_one(model, cfg, corpus, log2_lr, steps, batch, seq, seed, eval_batches, desc, progress):
    """One run of A: AdamW(0.9, 0.95), λ 0.1, ε 1e-12, clip 1 (rate logged), 10 % warm-up + linear
    decay to 10 % (LambdaLR, so every group keeps its ``lr_scale``); ``models.train`` drives the
    loop with its own clipping and cosine schedule off, and two optimizer hooks add ours."""
    import torch

    from completep import param_groups
    from neurips25_core.models import evaluate_bpb, train

    opt = torch.optim.AdamW(
        param_groups(model, cfg, lr=2.0**log2_lr, weight_decay=0.1, eps=1e-12), betas=(0.9, 0.95)
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _linear_decay(steps, max(1, steps // 10)))
    params = [p for p in model.parameters() if p.requires_grad]
    norms: list[float] = []

    def clip(optimizer, args, kwargs):
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, 1.0)))

    opt.register_step_pre_hook(clip)
    opt.register_step_post_hook(lambda optimizer, args, kwargs: sched.step())
    start = [[w.detach().clone() for w in layer] for layer in _hidden_weights(model)]
    try:
        res = train(
            model,
            corpus,
            steps=steps,
            optimizer=opt,
            batch_size=batch,
            seq_len=seq,
            grad_clip=None,
            schedule=False,
            seed=seed,
            progress=progress,
            desc=desc,
        )
        bpb = evaluate_bpb(model, corpus, batch_size=batch, seq_len=seq, num_batches=eval_batches)
        curve = res.losses
    except FloatingPointError:
        bpb, curve = math.inf, []
    moved = [
        sum(float((w.detach() - w0).norm() / w0.norm()) for w, w0 in zip(now, then, strict=True))
        / len(now)
        for now, then in zip(_hidden_weights(model), start, strict=True)
    ]
    clip_rate = sum(n > 1.0 for n in norms) / max(1, len(norms))
    return {
        "val_bpb": bpb if math.isfinite(bpb) else math.inf,
        "curve": curve,
        "clip_rate": clip_rate,
        "rel_change_per_layer": moved,
    }


def _mup_peer_check(ctx, base, width: int, log2_lr: float, corpus, seq: int, batch: int) -> None:
    """The peer: mup's ``MuReadout`` + ``set_base_shapes`` + ``MuAdamW`` on our kind="mup" model.

    At width = base (A's setting) its per-parameter LRs equal ours (``tests/test_peer_mup.py``
    checks them at m_N = 4), so instead of spending the sweep twice we check that five steps of
    the peer's optimizer give the losses of ours, and record the largest difference.
    """
    import mup
    import torch

    from completep import ParamConfig, param_groups, parameterize

    cfg = ParamConfig(kind="mup", base_width=width, base_depth=2)
    losses = {}
    gen = torch.Generator().manual_seed(0)
    batches = [corpus.get_batch("train", batch, seq, generator=gen) for _ in range(5)]
    for who in ("ours", "mup"):
        model = _model(base, width, 2, cfg, seed=0)
        handle = model._completep_handle
        handle.remove()
        weight = model.lm_head.weight.detach().clone()
        model.lm_head = mup.MuReadout(width, weight.shape[0], bias=False)
        with torch.no_grad():
            model.lm_head.weight.copy_(weight)
        wider = _model(base, 2 * width, 2, cfg, seed=0)
        wider.lm_head = mup.MuReadout(2 * width, weight.shape[0], bias=False)
        shape_base = _model(base, width, 2, cfg, seed=0)
        shape_base.lm_head = mup.MuReadout(width, weight.shape[0], bias=False)
        mup.set_base_shapes(model, shape_base, delta=wider, rescale_params=False)
        parameterize(model, cfg, reinit=False)
        if who == "ours":
            opt = torch.optim.AdamW(
                param_groups(model, cfg, lr=2.0**log2_lr, weight_decay=0.1, eps=1e-12),
                betas=(0.9, 0.95),
            )
        else:
            # the usual decay / no-decay split (norm gains undecayed, as in Table 1); mup scales
            # the LRs itself
            groups = param_groups(model, cfg, lr=1.0, weight_decay=1.0, eps=1.0)
            opt = mup.MuAdamW(
                [
                    {"params": g["params"], "weight_decay": 0.1 * (g["weight_decay"] > 0)}
                    for g in groups
                ],
                lr=2.0**log2_lr,
                eps=1e-12,
                betas=(0.9, 0.95),
            )
        run = []
        with torch.enable_grad():
            for x, y in batches:
                loss = torch.nn.functional.cross_entropy(
                    model(x).logits.reshape(-1, 256).float(), y.reshape(-1)
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                run.append(loss.item())
        losses[who] = run
    diff = max(abs(a - b) for a, b in zip(losses["ours"], losses["mup"], strict=True))
    ctx.log(f"peer mup (MuAdamW + MuReadout) vs kind='mup', 5 steps: max |loss diff| {diff:.2e}")
    ctx.record("mup_peer_max_loss_diff", diff, "nats", kind="mup", steps=5, log2_lr=log2_lr)


@SUITE.case("lr_transfer_depth", kind="quality", modes=("smoke", "quick"))
def lr_transfer_depth(ctx: Context) -> None:
    """A (quick): validation loss over an LR grid at depths 2 and 8; η*(L), SP vs CompleteP vs μP.

    D (laziness) comes from the same runs: the mean over a layer's hidden matrices of
    ‖W_T − W₀‖/‖W₀‖, at each depth's best grid LR, deepest over shallowest. The full size runs
    one case per arm (``arm_*_lr_transfer``) so that the arms can run in parallel processes.
    """
    _lr_transfer(
        ctx, ctx.pick(smoke=["sp", "completep"], quick=["sp", "completep", "mup"], full=[]), tag=""
    )


def _arm_case(kind: str):
    def case(ctx: Context) -> None:
        _lr_transfer(ctx, [kind], tag=f"_{kind}")

    case.__doc__ = (
        f"A (full size), arm {kind}: the LR grid at depths 2, 4, 8, 16 (smoke: a toy size)."
    )
    return case


for _kind in ("sp", "completep", "mup", "depth_mup"):
    SUITE.case(f"arm_{_kind}_lr_transfer", kind="quality", modes=("smoke", "full"))(
        _arm_case(_kind)
    )


def _grid_extend(grid: list[int], bpbs: list[float], lo: int, hi: int) -> int | None:
    """The next log₂η to run when the best point sits at an end of ``grid`` (None: interior, or the
    limit [lo, hi] reached). The same rule for every arm, so SP gets CompleteP's sweep budget."""
    best = min(range(len(grid)), key=bpbs.__getitem__)
    if best == 0 and grid[0] - 1 >= lo:
        return grid[0] - 1
    if best == len(grid) - 1 and grid[-1] + 1 <= hi:
        return grid[-1] + 1
    return None


def _lr_transfer(ctx: Context, kinds: list[str], tag: str) -> None:
    import statistics

    import torch

    from completep import ParamConfig
    from completep.diagnostics import fit_optimal_lr, loglog_slope
    from neurips25_core.data import stdlib_corpus

    width = ctx.pick(smoke=16, quick=32, full=32)
    heads = 2
    seq = ctx.pick(smoke=16, quick=32, full=32)
    batch = ctx.pick(smoke=4, quick=4, full=8)
    steps = ctx.pick(smoke=4, quick=30, full=200)
    depths = ctx.pick(smoke=[1, 2], quick=[2, 8], full=[2, 4, 8, 16])
    # every arm starts from the same grid and extends it by one octave at a time while seed 0's
    # best point sits at an end (full size), so each arm's optimum is interior (up to the limits)
    start_grid = ctx.pick(smoke=[-8, -6], quick=[-8, -6, -4], full=list(range(-10, -5)))
    limits = ctx.pick(smoke=(-9, -5), quick=(-8, -4), full=(-14, -2))
    extend = ctx.pick(smoke=bool(tag), quick=False, full=True)
    # a second seed at the three grid LRs around each seed-0 optimum, every arm (smoke: only the
    # arm cases take that path, to keep each case's smoke run short)
    second_seed = ctx.pick(smoke=bool(tag), quick=False, full=True)
    eval_batches = ctx.pick(smoke=2, quick=4, full=25)
    corpus = stdlib_corpus()
    base = _base_config(width, heads, 4 * width, seq)
    runs = []
    grids: dict[tuple[str, int], list[int]] = {}

    def run(kind, cfg, depth, log2_lr, seed):
        out = _train_one(
            _model(base, width, depth, cfg, seed=seed),
            cfg,
            corpus,
            log2_lr,
            steps,
            batch,
            seq,
            seed,
            eval_batches,
            f"{kind} L={depth} lr=2^{log2_lr} s{seed}",
            not ctx.smoke,
        )
        runs.append({"kind": kind, "depth": depth, "log2_lr": log2_lr, "seed": seed, **out})

    def bpb_of(kind, depth, log2_lr, seeds=None):
        vals = [
            r["val_bpb"]
            for r in runs
            if r["kind"] == kind
            and r["depth"] == depth
            and r["log2_lr"] == log2_lr
            and (seeds is None or r["seed"] in seeds)
        ]
        if not vals:
            return math.nan
        return statistics.fmean(vals) if all(math.isfinite(v) for v in vals) else math.inf

    with torch.inference_mode(False), single_thread():
        for kind in kinds:
            cfg = ParamConfig(kind=kind, base_width=width, base_depth=depths[0])
            for depth in depths:
                grid = list(start_grid)
                grids[(kind, depth)] = grid
                for log2_lr in grid:
                    run(kind, cfg, depth, log2_lr, seed=0)
                while extend:
                    nxt = _grid_extend(grid, [bpb_of(kind, depth, x) for x in grid], *limits)
                    if nxt is None:
                        break
                    if nxt < grid[0]:
                        grid.insert(0, nxt)
                    else:
                        grid.append(nxt)
                    ctx.log(f"{kind} L={depth}: optimum at the grid's end, extending to 2^{nxt}")
                    run(kind, cfg, depth, nxt, seed=0)
                if second_seed:
                    best = min(range(len(grid)), key=lambda i: bpb_of(kind, depth, grid[i]))
                    lo = min(max(0, best - 1), max(0, len(grid) - 3))
                    for log2_lr in grid[lo : lo + 3]:
                        run(kind, cfg, depth, log2_lr, seed=1)
        summary = {}
        for kind in kinds:
            fits = {}
            for depth in depths:
                grid = grids[(kind, depth)]
                bpbs = [bpb_of(kind, depth, x) for x in grid]
                fit = fit_optimal_lr([2.0**x for x in grid], bpbs)
                # per seed: seed 0 over its whole grid, seed 1 over its three points
                per_seed = {}
                for seed in (0, 1):
                    xs = [x for x in grid if not math.isnan(bpb_of(kind, depth, x, {seed}))]
                    if len(xs) >= 3:
                        ys = [bpb_of(kind, depth, x, {seed}) for x in xs]
                        per_seed[seed] = fit_optimal_lr([2.0**x for x in xs], ys)
                gaps = [
                    abs(bpb_of(kind, depth, x, {0}) - bpb_of(kind, depth, x, {1}))
                    for x in grid
                    if math.isfinite(bpb_of(kind, depth, x, {1}))
                    and math.isfinite(bpb_of(kind, depth, x, {0}))
                ]
                best_lr = grid[min(range(len(grid)), key=bpbs.__getitem__)]
                at_best = [
                    r
                    for r in runs
                    if r["kind"] == kind and r["depth"] == depth and r["log2_lr"] == best_lr
                ]
                clip_rate = statistics.fmean(r["clip_rate"] for r in at_best)
                moved = statistics.fmean(
                    statistics.fmean(r["rel_change_per_layer"]) for r in at_best
                )
                fits[depth] = {
                    **fit,
                    "grid": grid,
                    "per_seed": {str(k): v for k, v in per_seed.items()},
                    "max_seed_gap_bpb": max(gaps) if gaps else math.nan,
                    "best_val_bpb": min(bpbs),
                    "best_grid_log2_lr": best_lr,
                    "clip_rate_at_best": clip_rate,
                    "rel_weight_change_at_best": moved,
                    "seeds_at_best": len(at_best),
                }
                ctx.record(
                    "log2_optimal_lr",
                    fit["log2_lr"],
                    "log2",
                    kind=kind,
                    depth=depth,
                    edge=fit["edge"],
                    flat=fit["flat"],
                )
                ctx.record("best_val_bpb", min(bpbs), "bits/byte", kind=kind, depth=depth)
                ctx.record("clip_rate_at_best", clip_rate, "", kind=kind, depth=depth)
                ctx.record("rel_weight_change_at_best", moved, "", kind=kind, depth=depth)
                if gaps:
                    ctx.record("max_seed_gap_bpb", max(gaps), "bits/byte", kind=kind, depth=depth)
            slope = loglog_slope(depths, [fits[d]["log2_lr"] for d in depths])
            ctx.record("log2_lr_slope_vs_log2_depth", slope, "", lower_is_better=False, kind=kind)
            seed_slopes = {}
            for seed in ("0", "1"):
                if all(seed in fits[d]["per_seed"] for d in depths):
                    seed_slopes[seed] = loglog_slope(
                        depths, [fits[d]["per_seed"][seed]["log2_lr"] for d in depths]
                    )
                    ctx.record(
                        "log2_lr_slope_vs_log2_depth",
                        seed_slopes[seed],
                        "",
                        lower_is_better=False,
                        kind=kind,
                        seed=int(seed),
                    )
            lazy = fits[depths[-1]]["rel_weight_change_at_best"] / max(
                fits[depths[0]]["rel_weight_change_at_best"], 1e-30
            )
            ctx.record(
                "laziness_ratio",
                lazy,
                "x",
                lower_is_better=False,
                kind=kind,
                depths=f"{depths[-1]}/{depths[0]}",
            )
            summary[kind] = {
                "fits": fits,
                "slope": slope,
                "slope_per_seed": seed_slopes,
                "laziness_ratio": lazy,
            }
        if not _mup_available():
            ctx.log(
                "peer mup: not installed, its check is skipped (`uv pip install --no-deps mup`)"
            )
        elif ctx.full and "mup" in kinds:
            mup_best = summary["mup"]["fits"][depths[0]]["best_grid_log2_lr"]
            _mup_peer_check(ctx, base, width, mup_best, corpus, seq, batch)
    ctx.path(f"lr_transfer{tag}_runs.json").write_text(
        json.dumps(
            {
                "runs": runs,
                "summary": summary,
                "width": width,
                "seq": seq,
                "batch": batch,
                "steps": steps,
                "eval_batches": eval_batches,
                "start_grid": start_grid,
                "grid_limits": limits,
                "schedule": "10% linear warm-up, linear decay to 10%",
            },
            indent=1,
        )
    )
    for kind in kinds:
        xs = sorted({x for d in depths for x in grids[(kind, d)]})
        plot_lines(
            xs,
            {f"L={d}": [bpb_of(kind, d, x) for x in xs] for d in depths},
            ctx.path(f"lr_transfer_{'arm_' if tag else ''}{kind}.png"),
            xlabel="log2 base LR",
            ylabel="validation bits/byte (mean over seeds)",
            title=f"{kind}: width {width}, {steps} steps",
        )
    plot_lines(
        depths,
        {k: [summary[k]["fits"][d]["log2_lr"] for d in depths] for k in kinds},
        ctx.path(f"optimal_lr_vs_depth{tag}.png"),
        xlabel="depth",
        ylabel="log2 η* (quadratic fit)",
        title=f"η*(L), width {width}, {steps} steps",
        logx=True,
    )


@SUITE.case("coord_check_depth", kind="quality")
def coord_check_depth(ctx: Context) -> None:
    """B: mean |last block output| after a few steps across depth, SP vs μP vs α = 0.5 vs α = 1."""
    import torch

    from completep import ParamConfig, param_groups
    from completep.diagnostics import coord_check
    from neurips25_core.data import stdlib_corpus

    width = ctx.pick(smoke=16, quick=32, full=64)
    depths = ctx.pick(smoke=[2, 4], quick=[2, 8], full=[2, 4, 8, 16, 32])
    steps = ctx.pick(smoke=2, quick=5, full=10)
    seq, batch = ctx.pick(smoke=16, quick=32, full=64), ctx.pick(smoke=4, quick=8, full=16)
    corpus = stdlib_corpus()
    base = _base_config(width, 2, 4 * width, seq)
    gen = torch.Generator().manual_seed(0)
    fixed = [corpus.get_batch("train", batch, seq, generator=gen) for _ in range(steps)]
    last = {}
    with torch.inference_mode(False), single_thread():
        for kind in ("sp", "mup", "depth_mup", "completep"):
            cfg = ParamConfig(kind=kind, base_width=width, base_depth=depths[0])
            records = coord_check(
                lambda depth, cfg=cfg: _model(base, width, depth, cfg, seed=0),
                depths,
                lambda step: fixed[step],
                lambda model, cfg=cfg: torch.optim.AdamW(
                    param_groups(model, cfg, lr=1e-3, weight_decay=0.1, eps=1e-12),
                    betas=(0.9, 0.95),
                ),
                steps=steps,
            )
            last[kind] = [
                next(
                    r["value"]
                    for r in records
                    if r["size"] == d and r["step"] == steps and r["site"] == "last_block"
                )
                for d in depths
            ]
            ratio = last[kind][-1] / last[kind][0]
            ctx.record(
                "last_block_ratio",
                ratio,
                "x",
                kind=kind,
                depths=f"{depths[-1]}/{depths[0]}",
                step=steps,
            )
    plot_lines(
        depths,
        last,
        ctx.path("coord_check_depth.png"),
        xlabel="depth",
        ylabel=f"mean |last block output| at step {steps}",
        logx=True,
        logy=True,
    )


@SUITE.case("linearization", kind="quality", modes=("smoke", "full"))
def linearization(ctx: Context) -> None:
    """C: Fig. 6's toy on scikit-learn digits: distance from linearization after one Adam step.

    The median over seeds per depth and the log-log slope on depth, for α ∈ {½, 1}, in three
    readings (see ``completep.linearization``): the exact first-order term with both weights of
    branch 1 stepped, with its first weight alone, and the official notebook's measurement.
    """
    import statistics

    from completep.diagnostics import loglog_slope
    from completep.linearization import linearization_distance

    depths = ctx.pick(smoke=[2, 4], quick=[2, 8], full=[2, 8, 32, 128, 512])
    seeds = list(range(ctx.pick(smoke=2, quick=3, full=10)))
    width = ctx.pick(smoke=16, quick=32, full=64)
    batch = ctx.pick(smoke=8, quick=16, full=32)
    series = {}
    with single_thread():
        for step in ("both", "first", "notebook"):
            for alpha in (0.5, 1.0):
                dist = linearization_distance(
                    alpha, depths, seeds, width=width, batch=batch, step=step
                )
                med = [statistics.median(dist[d]) for d in depths]
                for d, v in zip(depths, med, strict=True):
                    ctx.record("median_distance", v, "", alpha=alpha, step=step, depth=d)
                logs = [math.log2(max(v, 1e-300)) for v in med]
                ctx.record(
                    "loglog_slope",
                    loglog_slope(depths, logs),
                    "",
                    lower_is_better=False,
                    alpha=alpha,
                    step=step,
                    width=width,
                    seeds=len(seeds),
                )
                series[f"alpha={alpha}, step {step}"] = [max(v, 1e-300) for v in med]
    plot_lines(
        depths,
        series,
        ctx.path("linearization.png"),
        xlabel="depth",
        ylabel="median |h1 - h_lin| / |h_lin|",
        title=f"one Adam step, width {width}, {len(seeds)} seeds",
        logx=True,
        logy=True,
    )


@SUITE.case("speed_step", kind="speed")
def speed_step(ctx: Context) -> None:
    """Training step time: plain Llama vs Llama with CompleteP hooks vs the Granite twin."""
    import torch
    from transformers import GraniteForCausalLM, LlamaForCausalLM

    from completep import ParamConfig, parameterize, scaled_config, to_granite_config

    width = ctx.pick(smoke=16, quick=64, full=64)
    depth = ctx.pick(smoke=2, quick=8, full=16)
    seq, batch = ctx.pick(smoke=16, quick=64, full=64), ctx.pick(smoke=2, quick=8, full=16)
    base = _base_config(width, 2, 4 * width, seq)
    config = scaled_config(base, width, depth)
    cfg = ParamConfig(kind="completep", base_width=width, base_depth=2)
    torch.manual_seed(0)
    plain = LlamaForCausalLM(config)
    hooked = LlamaForCausalLM(config)
    hooked.load_state_dict(plain.state_dict())
    parameterize(hooked, cfg, reinit=False)
    granite = GraniteForCausalLM(to_granite_config(config, cfg))
    granite.load_state_dict(hooked.state_dict())
    ids = torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode(False), torch.enable_grad():
        with torch.no_grad():
            torch.testing.assert_close(
                hooked(ids).logits, granite(ids).logits, rtol=1e-5, atol=1e-6
            )

        def step(model):
            def run():
                model.zero_grad(set_to_none=True)
                model(ids, labels=ids).loss.backward()

            return run

        with single_thread():
            result = compare(
                {"plain": step(plain), "hooked": step(hooked), "granite": step(granite)},
                baseline="plain",
                min_time=ctx.pick(smoke=0.01, quick=0.5, full=2.0),
            )
    result.record(ctx, width=width, depth=depth, seq=seq, batch=batch)
