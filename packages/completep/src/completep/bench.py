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


@SUITE.case("lr_transfer_depth", kind="quality")
def lr_transfer_depth(ctx: Context) -> None:
    """A: validation loss over an LR grid at several depths; η*(L) slope, SP vs CompleteP."""
    import torch

    from completep import ParamConfig, param_groups
    from completep.diagnostics import fit_optimal_lr, loglog_slope
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, train

    width = ctx.pick(smoke=16, quick=32, full=64)
    heads = ctx.pick(smoke=2, quick=2, full=4)
    seq = ctx.pick(smoke=16, quick=32, full=64)
    batch = ctx.pick(smoke=4, quick=8, full=16)
    steps = ctx.pick(smoke=4, quick=40, full=200)
    depths = ctx.pick(smoke=[1, 2], quick=[2, 8], full=[2, 4, 8, 16])
    log2_lrs = ctx.pick(smoke=[-8, -6], quick=[-9, -7, -5], full=list(range(-11, -4)))
    kinds = ctx.pick(
        smoke=["sp", "completep"],
        quick=["sp", "completep"],
        full=["sp", "mup", "depth_mup", "completep"],
    )
    eval_batches = ctx.pick(smoke=2, quick=8, full=20)
    if not _mup_available():
        ctx.log("peer mup: not installed (its arm is skipped; `uv pip install --no-deps mup`)")
    else:
        ctx.log("peer mup: installed, but its arm is not implemented yet (see README)")
    corpus = stdlib_corpus()
    base = _base_config(width, heads, 4 * width, seq)
    runs = []
    with torch.inference_mode(False), single_thread():
        for kind in kinds:
            cfg = ParamConfig(kind=kind, base_width=width, base_depth=depths[0])
            for depth in depths:
                for log2_lr in log2_lrs:
                    model = _model(base, width, depth, cfg, seed=0)
                    opt = torch.optim.AdamW(
                        param_groups(model, cfg, lr=2.0**log2_lr, weight_decay=0.1, eps=1e-12),
                        betas=(0.9, 0.95),
                    )
                    try:
                        res = train(
                            model,
                            corpus,
                            steps=steps,
                            optimizer=opt,
                            batch_size=batch,
                            seq_len=seq,
                            grad_clip=1.0,
                            seed=0,
                            progress=not ctx.smoke,
                            desc=f"{kind} L={depth} lr=2^{log2_lr}",
                        )
                        bpb = evaluate_bpb(
                            model, corpus, batch_size=batch, seq_len=seq, num_batches=eval_batches
                        )
                        curve = res.losses
                    except FloatingPointError:
                        bpb, curve = math.inf, []
                    runs.append(
                        {
                            "kind": kind,
                            "depth": depth,
                            "log2_lr": log2_lr,
                            "val_bpb": bpb,
                            "curve": curve,
                        }
                    )
        summary = {}
        for kind in kinds:
            fits = {}
            for depth in depths:
                rows = [r for r in runs if r["kind"] == kind and r["depth"] == depth]
                fit = fit_optimal_lr(
                    [2.0 ** r["log2_lr"] for r in rows], [r["val_bpb"] for r in rows]
                )
                best = min(r["val_bpb"] for r in rows)
                fits[depth] = {**fit, "best_val_bpb": best}
                ctx.record(
                    "log2_optimal_lr",
                    fit["log2_lr"],
                    "log2",
                    kind=kind,
                    depth=depth,
                    edge=fit["edge"],
                    flat=fit["flat"],
                )
                ctx.record("best_val_bpb", best, "bits/byte", kind=kind, depth=depth)
            slope = loglog_slope(depths, [fits[d]["log2_lr"] for d in depths])
            ctx.record("log2_lr_slope_vs_log2_depth", slope, "", lower_is_better=False, kind=kind)
            summary[kind] = {"fits": fits, "slope": slope}
    ctx.path("lr_transfer_runs.json").write_text(
        json.dumps({"runs": runs, "summary": summary, "width": width, "steps": steps}, indent=1)
    )
    for kind in kinds:
        series = {
            f"L={d}": [
                next(
                    r["val_bpb"]
                    for r in runs
                    if r["kind"] == kind and r["depth"] == d and r["log2_lr"] == x
                )
                for x in log2_lrs
            ]
            for d in depths
        }
        plot_lines(
            log2_lrs,
            series,
            ctx.path(f"lr_transfer_{kind}.png"),
            xlabel="log2 base LR",
            ylabel="validation bits/byte",
            title=f"{kind}: width {width}, {steps} steps",
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
