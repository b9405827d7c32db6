"""The sinkgd benchmark suite (``neurips25 bench sinkgd``).

Cases:

* ``quality`` — the reduced GaLore benchmark: a tiny Llama trained on the stdlib byte corpus at equal
  tokens with SinkGD(+AdamW on embeddings/head/norms), AdamW, SGD, SWAN(+AdamW) and
  ``torch.optim.Muon``(+AdamW). Validation loss/perplexity and
  tokens-to-target: the fraction of the best AdamW's tokens each arm needs to reach that AdamW's
  final validation loss (paper: 40 % at 60M–1B).
  ``--smoke``: a 1-layer toy model, 8 steps. ``--quick``: a 0.13M model, 80 steps, SinkGD at
  η = 1e-3 vs the better of AdamW at 1e-3 and 3e-3, one seed.
  ``--full``: the spec's 0.86M model, 200 steps, an LR sweep per arm at seed 0
  (:data:`FULL_SWEEP`), each arm's best lr again at seeds 1 and 2, tokens-to-target against the
  best AdamW per seed.
* ``control`` — AdamW with the hybrids' grouping and embedding/head/norm lr (3e-3), its matrix lr
  swept like the quality arms (``--full``: spec model, seed 0 then 3 seeds at the best lr).
* ``memory`` — optimizer-state bytes of AdamW, SinkGD+AdamW and SGD on the GaLore 60M/130M/350M/1B
  Llama shapes (meta-device models, the real optimizers stepped on meta tensors) and on the tiny
  model (measured; ``--full`` adds the peak RSS of a training step in a fresh process).
* ``speed`` — optimizer step time on CPU against ``AdamW(foreach=True)`` on the same matrices:
  interleaved medians from :func:`neurips25_core.bench.compare`, one thread.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from typing import Any

import torch

from neurips25_core.bench import Context, Suite, compare, plot_bars, plot_lines, single_thread

SUITE = Suite(
    name="sinkgd",
    paper="Gradient Multi-Normalization for Efficient LLM Training",
    url="https://arxiv.org/abs/2502.06742",
)

# GaLore's Llama configs (jiaweizzhao/GaLore configs/llama_*.json): hidden, intermediate, heads, layers.
GALORE_SHAPES = {
    "60M": (512, 1376, 8, 8),
    "130M": (768, 2048, 12, 12),
    "350M": (1024, 2736, 16, 24),
    "1B": (2048, 5461, 32, 24),
}
GALORE_VOCAB = 32000


# ----------------------------------------------------------------------------- optimizers


class _Chain(torch.optim.Optimizer):
    """Several optimizers stepped together, exposing their param groups (for LR schedulers)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers
        params = [p for o in optimizers for g in o.param_groups for p in g["params"]]
        super().__init__(params, {})
        self.param_groups = [g for o in optimizers for g in o.param_groups]

    @property
    def state(self):
        merged: dict = {}
        for o in getattr(self, "optimizers", []):
            merged.update(o.state)
        return merged

    @state.setter
    def state(self, value) -> None:
        pass

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for o in self.optimizers:
            o.step()
        return loss


def muon_available() -> bool:
    """Whether this torch has ``torch.optim.Muon``."""
    return hasattr(torch.optim, "Muon")


def make_optimizer(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """The benchmark's optimizers, with the paper's routing for the hybrids.

    ``lr`` is the matrix learning rate for SinkGD/SWAN/Muon, whose AdamW part (embeddings, head,
    norms) runs at 3e-3 (the spec's best pair at this scale, "1e-3 / 3e-3"), and the single learning
    rate of AdamW and SGD. No weight decay anywhere (GaLore's setting).
    """
    import sinkgd

    adam_lr = 3e-3  # the spec's embedding/head/norm lr for the hybrids (its table: "1e-3 / 3e-3")
    if name == "sinkgd":
        groups = sinkgd.param_groups(model)
        groups[0]["lr"] = lr
        return sinkgd.SinkGDWithAdam(groups, lr=adam_lr, num_iters=5)
    if name == "swan":
        groups = sinkgd.param_groups(model, key="use_swan")
        groups[0]["lr"] = lr
        return sinkgd.SWANWithAdam(groups, lr=adam_lr)
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0)
    if name == "adamw_split":
        # the control: AdamW everywhere, with the hybrids' grouping and embedding/head/norm lr
        groups = sinkgd.param_groups(model)
        groups[0]["lr"] = lr
        groups[1]["lr"] = adam_lr
        groups = [{k: v for k, v in g.items() if k == "params" or k == "lr"} for g in groups]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), weight_decay=0.0)
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    if name == "muon":
        groups = sinkgd.param_groups(model, key="use_muon")
        muon = torch.optim.Muon(
            groups[0]["params"], lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw"
        )
        adam = torch.optim.AdamW(
            groups[1]["params"], lr=adam_lr, betas=(0.9, 0.999), weight_decay=0.0
        )
        return _Chain([muon, adam])
    raise ValueError(f"name: unknown optimizer {name!r}")


# ----------------------------------------------------------------------------- quality

#: Model sizes: ``toy`` (smoke), ``quick`` (0.13M parameters), ``spec`` (the spec's 0.86M model).
MODEL_SIZES = {
    "toy": {"hidden_size": 32, "num_layers": 1, "num_heads": 4, "intermediate_size": 48},
    "quick": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 172},
    "spec": {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "intermediate_size": 344},
}


def _model_config(size: str):
    from neurips25_core.models import tiny_llama_config

    if size not in MODEL_SIZES:
        raise ValueError(f"size: expected one of {sorted(MODEL_SIZES)}, got {size!r}")
    return tiny_llama_config(**MODEL_SIZES[size])


def train_one(
    name: str,
    lr: float,
    seed: int,
    steps: int,
    size: str,
    batch_size: int,
    seq_len: int,
    evals: int,
) -> dict[str, Any]:
    """Train one tiny Llama; returns the validation-loss curve (nats) against tokens.

    A run whose loss becomes non-finite is returned with ``diverged=True`` and an infinite loss.
    """
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, tiny_llama, train

    corpus = stdlib_corpus()
    model = tiny_llama(_model_config(size), seed=seed)
    opt = make_optimizer(name, model, lr)
    every = max(1, steps // evals)
    tokens_per_step = batch_size * seq_len
    out = {"name": name, "lr": lr, "seed": seed, "steps": steps, "diverged": False}
    try:
        result = train(
            model,
            corpus,
            steps,
            optimizer=opt,
            batch_size=batch_size,
            seq_len=seq_len,
            seed=seed,
            grad_clip=1.0,
            weight_decay=0.0,
            eval_every=every,
            eval_batches=8,
            desc=f"{name} lr={lr:g} seed={seed}",
        )
    except FloatingPointError:
        out.update(val_loss=math.inf, curve=[], tokens=steps * tokens_per_step, seconds=0.0)
        out["diverged"] = True
        return out
    final = evaluate_bpb(
        model, corpus, batch_size=batch_size, seq_len=seq_len, num_batches=20
    ) * math.log(2)
    out.update(
        val_loss=final,
        curve=[(s * tokens_per_step, b * math.log(2)) for s, b in result.val_bpb],
        tokens=result.tokens,
        seconds=result.seconds,
    )
    return out


def tokens_to_target(curve: list[tuple[int, float]], target: float) -> float | None:
    """Tokens at which a validation curve first reaches ``target`` (linear interpolation); None if never."""
    prev = (0, math.inf)
    for tokens, loss in curve:
        if loss <= target:
            if math.isinf(prev[1]):
                return float(tokens)
            frac = (prev[1] - target) / (prev[1] - loss)
            return prev[0] + frac * (tokens - prev[0])
        prev = (tokens, loss)
    return None


#: What each arm is: the name in tables and plots.
ARM_LABELS = {
    "sinkgd": "SinkGD (L=5) + AdamW",
    "adamw": "AdamW",
    "adamw_split": "AdamW, SinkGD's grouping (embed/head/norm at 3e-3)",
    "muon": "Muon (torch.optim.Muon) + AdamW",
    "swan": "SWAN + AdamW",
    "sgd": "SGD",
}

#: The ``--full`` sweep: arm -> (learning-rate grid, seeds every grid point runs at). Every arm is
#: swept at seed 0 and runs its best learning rate again at seeds 1 and 2. The grids are ×2 apart;
#: when the best value sits on an edge, the grid is extended by one more ×2 step (at most twice per
#: arm), so every arm's best learning rate is bracketed. AdamW, the baseline, gets the largest grid.
FULL_SWEEP: dict[str, tuple[tuple[float, ...], tuple[int, ...]]] = {
    "adamw": ((5e-4, 1e-3, 2e-3, 4e-3), (0,)),
    "sinkgd": ((5e-4, 1e-3, 2e-3), (0,)),
    "muon": ((2e-3, 4e-3, 8e-3), (0,)),
    "swan": ((5e-4, 1e-3, 2e-3), (0,)),
    "sgd": ((0.5, 1.0), (0,)),
}
#: The ``control`` case (a separate case, so that it can run on its own next to the quality case): AdamW
#: with the hybrids' grouping and embedding/head/norm lr, the control for that part of the recipe.
CONTROL_SWEEP = {"adamw_split": ((1e-3, 2e-3), (0,))}
#: ``--quick`` and ``--smoke``: SinkGD at the paper's η = 1e-3 against the better of two AdamW lrs.
QUICK_SWEEP: dict[str, tuple[tuple[float, ...], tuple[int, ...]]] = {
    "sinkgd": ((1e-3,), (0,)),
    "adamw": ((1e-3, 3e-3), (0,)),
}
FULL_SEEDS = (0, 1, 2)
MAX_EXTENSIONS = 2

QUALITY_SIZES = {  # mode -> model size, steps, batch size, sequence length, evaluations
    "smoke": ("toy", 8, 4, 32, 4),
    "quick": ("quick", 80, 16, 64, 8),
    "full": ("spec", 200, 16, 128, 10),
}


def _mean_loss(runs: list[dict[str, Any]]) -> float:
    return statistics.mean(r["val_loss"] for r in runs) if runs else math.inf


def run_sweep(
    sweep: dict[str, tuple[tuple[float, ...], tuple[int, ...]]],
    seeds: tuple[int, ...],
    train: Callable[[str, float, int], dict[str, Any]],
    extend: bool = True,
    progress: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Run every arm's grid (extending it at an edge best), then each arm's best lr at ``seeds``.

    Args:
        sweep: arm -> (lr grid, seeds each grid point runs at).
        seeds: the seeds every arm's best lr must have in the end.
        train: ``(arm, lr, seed) -> run dict`` with at least ``val_loss``.
        extend: extend a grid by one ×(grid ratio) step when its best lr is an edge.
        progress: show a bar over the runs.

    Returns:
        ``(runs, best)``: every run, and each arm's best lr (lowest mean final loss over the seeds
        its grid ran at).
    """
    from neurips25_core.progress import progress_bar

    planned = sum(len(g) * len(s) + len(set(seeds) - set(s)) for g, s in sweep.values())
    bar = progress_bar(total=planned, desc="quality sweep", unit="run", enabled=progress)
    runs: list[dict[str, Any]] = []
    best: dict[str, float] = {}

    def run(arm: str, lr: float, seed: int) -> None:
        bar.set_postfix_str(f"{arm} lr={lr:g} seed={seed}")
        runs.append(train(arm, lr, seed))
        bar.update(1)

    try:
        for arm, (grid, arm_seeds) in sweep.items():
            grid = sorted(grid)
            for lr in grid:
                for seed in arm_seeds:
                    run(arm, lr, seed)

            def loss_at(lr: float, arm: str = arm, arm_seeds: tuple = arm_seeds) -> float:
                return _mean_loss(
                    [
                        r
                        for r in runs
                        if r["name"] == arm and r["lr"] == lr and r["seed"] in arm_seeds
                    ]
                )

            for _ in range(MAX_EXTENSIONS if extend and len(grid) > 1 else 0):
                top = min(grid, key=loss_at)
                if top == grid[0]:
                    new = grid[0] * grid[0] / grid[1]
                    grid.insert(0, new)
                elif top == grid[-1]:
                    new = grid[-1] * grid[-1] / grid[-2]
                    grid.append(new)
                else:
                    break
                bar.total += len(arm_seeds)
                for seed in arm_seeds:
                    run(arm, new, seed)
            best[arm] = min(grid, key=loss_at)
            for seed in seeds:
                if seed not in arm_seeds:
                    run(arm, best[arm], seed)
    finally:
        bar.close()
    return runs, best


@SUITE.case("quality", kind="quality")
def quality(ctx: Context) -> None:
    """Reduced GaLore benchmark: an LR sweep per optimizer at equal tokens, tokens-to-target vs the best AdamW."""
    size, steps, batch_size, seq_len, evals = QUALITY_SIZES[ctx.mode]
    sweep = ctx.pick(smoke=QUICK_SWEEP, quick=QUICK_SWEEP, full=FULL_SWEEP)
    sweep = {k: v for k, v in sweep.items() if k != "muon" or muon_available()}
    seeds = ctx.pick(smoke=(0,), quick=(0,), full=FULL_SEEDS)

    log = ctx.path("quality_runs.jsonl")
    log.write_text("")

    def train(arm: str, lr: float, seed: int) -> dict[str, Any]:
        run = train_one(arm, lr, seed, steps, size, batch_size, seq_len, evals)
        with log.open("a") as f:  # every finished run, as it finishes (the raw data of the case)
            f.write(json.dumps(run) + "\n")
        return run

    # One intra-op thread: on the shared 2-core machine two OpenMP threads per process spin-wait
    # against the neighbours' jobs (measured at load 10: 5.2 s/step with two threads, 0.4-0.7 with
    # one, on the spec model); every arm gets the same one thread.
    with single_thread():
        runs, best = run_sweep(sweep, seeds, train, extend=ctx.full)
    ctx.log(f"best learning rates: {best}")

    rows: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        rows.setdefault((r["name"], r["lr"]), []).append(r)
    adamw_best = rows[("adamw", best["adamw"])]
    adamw_loss = _mean_loss(adamw_best)
    baseline = f"AdamW lr={best['adamw']:g} (best of {len({lr for n, lr in rows if n == 'adamw'})})"
    for (name, lr), rs in sorted(rows.items()):
        finite = [r["val_loss"] for r in rs if not r["diverged"]]
        mean = statistics.mean(finite) if len(finite) == len(rs) else float("nan")
        ctx.record(
            "val_loss",
            mean,
            "nats",
            baseline=baseline,
            baseline_value=adamw_loss,
            optimizer=name,
            lr=lr,
            best=lr == best[name],
            seeds=len(rs),
            diverged=len(rs) - len(finite),
            std=round(statistics.stdev(finite), 4) if len(finite) > 1 else 0.0,
            ppl=round(math.exp(mean), 3) if math.isfinite(mean) else float("nan"),
            tokens=rs[0]["tokens"],
        )

    # tokens-to-target: per seed, each arm at its best lr against the best AdamW run of that seed
    summary: dict[str, dict[str, Any]] = {}
    for name, lr in best.items():
        if name == "adamw":
            continue
        ratios = []
        for adam in adamw_best:
            other = next(
                (r for r in rows[(name, lr)] if r["seed"] == adam["seed"] and not r["diverged"]),
                None,
            )
            if other is None or adam["diverged"]:
                continue
            target = adam["curve"][-1][1]
            reached = tokens_to_target(other["curve"], target)
            ratio = reached / adam["tokens"] if reached is not None else float("nan")
            ratios.append(ratio)
            ctx.record(
                "tokens_to_best_adamw_loss",
                ratio,
                "fraction of AdamW tokens",
                optimizer=name,
                lr=lr,
                seed=adam["seed"],
                reached=reached is not None,
                target_val_loss=round(target, 4),
                adamw_lr=best["adamw"],
            )
        got = [x for x in ratios if not math.isnan(x)]
        summary[name] = {
            "lr": lr,
            "mean": statistics.mean(got) if len(got) == len(ratios) and got else float("nan"),
            "std": statistics.stdev(got) if len(got) > 1 else 0.0,
            "reached": len(got),
            "seeds": len(ratios),
        }
        if len(ratios) > 1:
            ctx.record(
                "tokens_to_best_adamw_loss_mean",
                summary[name]["mean"],
                "fraction of AdamW tokens",
                optimizer=name,
                lr=lr,
                seeds=len(ratios),
                reached=len(got),
                std=round(summary[name]["std"], 4),
                adamw_lr=best["adamw"],
            )
    _write_sweep_table(ctx, rows, best, summary, steps * batch_size * seq_len)

    # plots: the swept grid at seed 0 (what the choice of lr compares) and, per arm, its best lr's
    # mean ± std over every seed
    lr_arms = [n for n in best if n != "sgd"]
    lrs = sorted({lr for n, lr in rows if n in lr_arms})
    sweep_series, sweep_err = {}, {}
    for name in lr_arms:
        label = ARM_LABELS[name]
        seed0 = []
        for lr in lrs:
            r0 = [r for r in rows.get((name, lr), []) if r["seed"] == seeds[0]]
            seed0.append(r0[0]["val_loss"] if r0 and not r0[0]["diverged"] else float("nan"))
        sweep_series[f"{label}, seed {seeds[0]}"] = seed0
        mean, sd = _row_stats(rows[(name, best[name])])
        sweep_series[f"{label}, best lr, mean of {len(rows[(name, best[name])])}"] = [
            mean if lr == best[name] else float("nan") for lr in lrs
        ]
        sweep_err[f"{label}, best lr, mean of {len(rows[(name, best[name])])}"] = [
            (0.0 if math.isnan(sd) else sd) if lr == best[name] else 0.0 for lr in lrs
        ]
    plot_lines(
        lrs,
        sweep_series,
        ctx.path("quality_lr_sweep.png"),
        xlabel="learning rate (SinkGD/SWAN/Muon: the matrix lr)",
        ylabel="final validation loss (nats/byte)",
        title=f"LR sweep, {steps} steps ({ctx.mode})",
        logx=True,
        errors=sweep_err,
    )
    curves = {}
    for name, lr in best.items():
        rs = [r for r in rows[(name, lr)] if not r["diverged"]]
        if rs:
            points = list(zip(*[[loss for _, loss in r["curve"]] for r in rs]))
            curves[f"{ARM_LABELS[name]} lr={lr:g}"] = [statistics.mean(p) for p in points]
    x = [t / 1e3 for t, _ in adamw_best[0]["curve"]]
    plot_lines(
        x,
        curves,
        ctx.path("quality_val_loss.png"),
        xlabel="training tokens (K)",
        ylabel="validation loss (nats/byte), mean over seeds",
        title=f"tiny Llama on stdlib bytes, each at its best lr ({ctx.mode})",
    )


@SUITE.case("control", kind="quality")
def control(ctx: Context) -> None:
    """The AdamW control with the hybrids' grouping and embedding/head/norm lr (same sizes as quality)."""
    size, steps, batch_size, seq_len, evals = QUALITY_SIZES[ctx.mode]
    grid, _ = CONTROL_SWEEP["adamw_split"]
    sweep = {
        "adamw_split": ctx.pick(smoke=(grid[:1], (0,)), quick=(grid[:1], (0,)), full=(grid, (0,)))
    }
    seeds = ctx.pick(smoke=(0,), quick=(0,), full=FULL_SEEDS)
    log = ctx.path("control_runs.jsonl")
    log.write_text("")

    def train(arm: str, lr: float, seed: int) -> dict[str, Any]:
        run = train_one(arm, lr, seed, steps, size, batch_size, seq_len, evals)
        with log.open("a") as f:
            f.write(json.dumps(run) + "\n")
        return run

    with single_thread():  # as in the quality case
        runs, best = run_sweep(sweep, seeds, train, extend=ctx.full)
    rows: dict[float, list[dict[str, Any]]] = {}
    for r in runs:
        rows.setdefault(r["lr"], []).append(r)
    for lr, rs in sorted(rows.items()):
        mean, sd = _row_stats(rs)
        ctx.record(
            "val_loss",
            mean,
            "nats",
            optimizer="adamw_split",
            lr=lr,
            embed_head_norm_lr=3e-3,
            best=lr == best["adamw_split"],
            seeds=len(rs),
            seed0=round(next(r for r in rs if r["seed"] == seeds[0])["val_loss"], 4),
            std=round(sd, 4),
            tokens=rs[0]["tokens"],
        )


def _row_stats(rs: list[dict[str, Any]]) -> tuple[float, float]:
    if not rs or any(r["diverged"] for r in rs):
        return float("nan"), float("nan")
    losses = [r["val_loss"] for r in rs]
    return statistics.mean(losses), statistics.stdev(losses) if len(losses) > 1 else 0.0


def _write_sweep_table(ctx: Context, rows, best, summary, tokens: int) -> None:
    """``quality_sweep.md``: the swept grid (mean ± std final loss, seeds) and tokens-to-target."""
    lines = [
        f"# LR sweep, {ctx.mode} ({tokens:,} training tokens per run)",
        "",
        "Final validation loss (nats/byte, 20 batches). The sweep is decided at seed 0 (the",
        "`seed 0` column compares every grid point on the same seed); the arm's best lr (**bold**)",
        "then runs at every seed (`mean ± std`). `div` = diverged.",
        "",
        "| optimizer | lr | seed 0 | mean ± std | seeds |",
        "|---|---:|---:|---:|---:|",
    ]
    order = list(ARM_LABELS)
    for (name, lr), rs in sorted(rows.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        mean, sd = _row_stats(rs)
        first = next((r for r in rs if r["seed"] == min(x["seed"] for x in rs)), None)
        seed0 = "div" if first["diverged"] else f"{first['val_loss']:.4f}"
        cell = "div" if math.isnan(mean) else (f"{mean:.4f} ± {sd:.4f}" if len(rs) > 1 else "")
        if lr == best[name]:
            seed0, cell = f"**{seed0}**", f"**{cell}**" if cell else ""
        lines.append(f"| {ARM_LABELS[name]} | {lr:g} | {seed0} | {cell} | {len(rs)} |")
    lines += [
        "",
        f"Tokens to reach the best AdamW's (lr {best['adamw']:g}) final validation loss, as a",
        "fraction of AdamW's tokens, per seed against the AdamW run of the same seed:",
        "",
        "| optimizer | lr | mean | std | reached |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {ARM_LABELS[name]} | {s['lr']:g} | {s['mean']:.3f} | {s['std']:.3f} | "
            f"{s['reached']}/{s['seeds']} |"
        )
    ctx.path("quality_sweep.md").write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- memory


def _meta_state_bytes(config, which: str) -> tuple[int, int]:
    """(parameter count, optimizer-state bytes) of ``which`` on a meta-device LlamaForCausalLM."""
    from transformers import LlamaForCausalLM

    import sinkgd

    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    for p in model.parameters():
        p.grad = torch.empty_like(p)
    if which == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    elif which == "sinkgd":
        opt = sinkgd.SinkGDWithAdam(model, lr=1e-3, foreach=False, backend="torch")
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    opt.step()
    params = sum(p.numel() for p in model.parameters())
    # count the fp32 moments only (the scalar "step" tensors are negligible and device-dependent)
    state = sum(
        v.numel() * 4
        for st in opt.state.values()
        for v in st.values()
        if isinstance(v, torch.Tensor) and v.ndim > 0
    )
    return params, state


@SUITE.case("memory", kind="speed")
def memory(ctx: Context) -> None:
    """Optimizer-state bytes: GaLore shapes (meta device) and the tiny model (measured)."""
    import sinkgd
    from neurips25_core.models import tiny_llama, tiny_llama_config

    sizes = ctx.pick(smoke=["60M"], quick=["60M", "130M"], full=list(GALORE_SHAPES))
    table: dict[str, list[float]] = {"AdamW": [], "SinkGD+AdamW": [], "SGD": []}
    for size in sizes:
        hidden, inter, heads, layers = GALORE_SHAPES[size]
        cfg = tiny_llama_config(
            hidden_size=hidden,
            intermediate_size=inter,
            num_heads=heads,
            num_layers=layers,
            vocab_size=GALORE_VOCAB,
            max_position_embeddings=256,
        )
        params, adam = _meta_state_bytes(cfg, "adamw")
        _, sink = _meta_state_bytes(cfg, "sinkgd")
        _, sgd = _meta_state_bytes(cfg, "sgd")
        ctx.record(
            "state_bytes_sinkgd",
            sink,
            "B",
            baseline="AdamW",
            baseline_value=adam,
            model=size,
            params=params,
        )
        ctx.record(
            "state_bytes_sgd",
            sgd,
            "B",
            baseline="AdamW",
            baseline_value=adam,
            model=size,
            params=params,
        )
        for k, v in zip(table, (adam, sink, sgd)):
            table[k].append(v / 2**30)
    # the tiny model of the quality case, with real tensors
    model = tiny_llama(_model_config(ctx.pick(smoke="toy", quick="quick", full="spec")), seed=0)
    x = torch.randint(0, 256, (4, 32))
    measured = {}
    for which in ("adamw", "sinkgd", "sgd"):
        model.zero_grad()
        opt = make_optimizer(which, model, 1e-3)
        for _ in range(2):
            model(x, labels=x).loss.backward()
            opt.step()
        measured[which] = sinkgd.optimizer_state_bytes(opt)
    total = sum(p.numel() for p in model.parameters())
    ctx.record(
        "state_bytes_sinkgd",
        measured["sinkgd"],
        "B",
        baseline="AdamW",
        baseline_value=measured["adamw"],
        model="tiny",
        params=total,
    )
    ctx.record(
        "state_bytes_sgd",
        measured["sgd"],
        "B",
        baseline="AdamW",
        baseline_value=measured["adamw"],
        model="tiny",
        params=total,
    )
    if ctx.full:
        from neurips25_core.bench import peak_rss_subprocess

        for which in ("adamw", "sinkgd", "sgd"):
            setup = (
                "import torch\nfrom neurips25_core.models import tiny_llama, tiny_llama_config\n"
                "from sinkgd.bench import make_optimizer, _model_config\n"
                "model = tiny_llama(_model_config('spec'), seed=0)\nx = torch.randint(0, 256, (16, 128))\n"
                f"opt = make_optimizer({which!r}, model, 1e-3)\n"
            )
            code = "for _ in range(3):\n    model(x, labels=x).loss.backward(); opt.step(); opt.zero_grad()\n"
            rss = peak_rss_subprocess(code, setup=setup)
            ctx.record(
                "train_step_peak_rss_delta", rss["delta"], "B", optimizer=which, model="spec 0.86M"
            )
    plot_bars(
        sizes,
        {k: v for k, v in table.items()},
        ctx.path("memory_state.png"),
        ylabel="optimizer state (GiB, fp32)",
        title="optimizer state on GaLore Llama shapes",
    )


# ----------------------------------------------------------------------------- speed


def _matrices(shapes: list[tuple[int, int]], seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = []
    for s in shapes:
        p = torch.nn.Parameter(torch.randn(*s, generator=g) * 0.02)
        p.grad = torch.randn(*s, generator=g)
        params.append(p)
    return params


def _layer_shapes(hidden: int, inter: int, layers: int) -> list[tuple[int, int]]:
    per_layer = [(hidden, hidden)] * 4 + [(inter, hidden), (inter, hidden), (hidden, inter)]
    return per_layer * layers


@SUITE.case("speed", kind="speed")
def speed(ctx: Context) -> None:
    """Optimizer step time on CPU vs AdamW(foreach=True) on the same matrices, interleaved medians."""
    import sinkgd

    configs = ctx.pick(
        smoke={"toy matrices": [(32, 48), (48, 32)] * 2},
        quick={
            "tiny (spec 0.86M) matrices": _layer_shapes(128, 344, 4),
            "60M, one layer": _layer_shapes(512, 1376, 1),
        },
        full={
            "tiny (spec 0.86M) matrices": _layer_shapes(128, 344, 4),
            "60M, one layer": _layer_shapes(512, 1376, 1),
            "130M, one layer": _layer_shapes(768, 2048, 1),
        },
    )
    min_time = ctx.pick(smoke=0.01, quick=0.3, full=1.0)
    variants: dict[str, Callable[[list], torch.optim.Optimizer]] = {
        "SinkGD L=5": lambda ps: sinkgd.SinkGD(ps, lr=1e-3, num_iters=5, foreach=False),
        "SinkGD L=5 foreach": lambda ps: sinkgd.SinkGD(ps, lr=1e-3, num_iters=5, foreach=True),
        "SinkGD L=1": lambda ps: sinkgd.SinkGD(ps, lr=1e-3, num_iters=1, foreach=False),
        "SWAN": lambda ps: sinkgd.SWAN(ps, lr=1e-3),
        "SGD": lambda ps: torch.optim.SGD(ps, lr=1e-3, foreach=True),
    }
    if muon_available():
        variants["Muon (torch)"] = lambda ps: torch.optim.Muon(ps, lr=1e-3, weight_decay=0.0)
    labels, series = [], {}
    # One intra-op thread: on a shared 2-core machine, multi-threaded timings of these small ops
    # measure the neighbours' load more than the optimizers (every optimizer gets the same thread).
    with single_thread():
        for label, shapes in configs.items():
            params = _matrices(shapes)
            fns = {"AdamW foreach": torch.optim.AdamW(params, lr=1e-6, foreach=True).step}
            for name, make in variants.items():
                # SWAN's O(m²n) Newton–Schulz takes seconds per step on the 60M/130M layers
                if name == "SWAN" and not ctx.full and label.endswith("one layer"):
                    continue
                fns[name] = make(params).step
            # at most 100 rounds: SGD's 1 ms step would otherwise hold SWAN's 1 s one for 200
            comparison = compare(
                fns, baseline="AdamW foreach", warmup=2, min_time=min_time, max_rounds=100
            )
            comparison.record(ctx, metric="step_time", shapes=label, matrices=len(shapes))
            ctx.log(f"{label}:\n{comparison}")
            labels.append(label)
            base = comparison.timings["AdamW foreach"].median
            for name in ["AdamW foreach", *variants]:
                t = comparison.timings.get(name)
                series.setdefault(name, []).append(t.median / base if t else float("nan"))
    plot_bars(
        labels,
        series,
        ctx.path("speed_step_time.png"),
        ylabel="step time / AdamW(foreach) step time",
        title="optimizer step on CPU, 1 thread, medians (lower is faster)",
    )
