"""The sinkgd benchmark suite (``neurips25 bench sinkgd``).

Cases:

* ``quality`` — the reduced GaLore benchmark: a tiny Llama trained on the stdlib byte corpus at equal
  tokens with SinkGD(+AdamW on embeddings/head/norms), AdamW, SGD, SWAN(+AdamW) and, when present,
  ``torch.optim.Muon``(+AdamW). Validation loss/perplexity and tokens-to-target: the fraction of
  AdamW's tokens that SinkGD needs to reach AdamW's final validation loss (paper: 40 % at 60M–1B).
  ``--quick``: a smaller model (0.13M), 80 steps, SinkGD at η = 1e-3 vs the better of AdamW at
  1e-3 and 3e-3, one seed.
  ``--full``: the spec's 0.86M-parameter model, an LR sweep per optimizer (seed 0), then the best LR
  of each with seeds 1 and 2.
* ``memory`` — optimizer-state bytes of AdamW, SinkGD+AdamW and SGD on the GaLore 60M/130M/350M/1B
  Llama shapes (meta-device models, the real optimizers stepped on meta tensors) and on the tiny
  model (measured; ``--full`` adds the peak RSS of a training step in a fresh process).
* ``speed`` — optimizer step time on CPU against ``AdamW(foreach=True)`` on the same matrices, same run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import torch

from neurips25_core.bench import Context, Suite, plot_bars, plot_lines, time_fn

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


def _model_config(quick: bool):
    from neurips25_core.models import tiny_llama_config

    if quick:
        return tiny_llama_config(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=172)
    return tiny_llama_config(hidden_size=128, num_layers=4, num_heads=4, intermediate_size=344)


def train_one(
    name: str,
    lr: float,
    seed: int,
    steps: int,
    quick: bool,
    batch_size: int,
    seq_len: int,
    evals: int,
) -> dict[str, Any]:
    """Train one tiny Llama; returns the validation-loss curve (nats) against tokens."""
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, tiny_llama, train

    corpus = stdlib_corpus()
    model = tiny_llama(_model_config(quick), seed=seed)
    opt = make_optimizer(name, model, lr)
    every = max(1, steps // evals)
    result = train(
        model,
        corpus,
        steps,
        optimizer=opt,
        batch_size=batch_size,
        seq_len=seq_len,
        seed=seed,
        grad_clip=1.0,
        eval_every=every,
        eval_batches=8,
        desc=f"{name} lr={lr:g} seed={seed}",
    )
    final = evaluate_bpb(
        model, corpus, batch_size=batch_size, seq_len=seq_len, num_batches=20
    ) * math.log(2)
    tokens_per_step = batch_size * seq_len
    return {
        "name": name,
        "lr": lr,
        "seed": seed,
        "steps": steps,
        "val_loss": final,
        "curve": [(s * tokens_per_step, b * math.log(2)) for s, b in result.val_bpb],
        "tokens": result.tokens,
        "seconds": result.seconds,
    }


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


LR_GRID = {
    "sinkgd": (3e-4, 1e-3, 3e-3),
    "adamw": (1e-3, 3e-3, 1e-2),
    "sgd": (0.1, 0.5),
    "swan": (3e-4, 1e-3),
    "muon": (0.003, 0.01),
}
QUICK_ADAMW_LRS = (
    1e-3,
    3e-3,
)  # the baseline gets its best of two; SinkGD runs at the paper's η = 1e-3


@SUITE.case("quality", kind="quality", modes=("quick", "full"))
def quality(ctx: Context) -> None:
    """Reduced GaLore benchmark: validation loss at equal tokens and SinkGD's tokens-to-target vs AdamW."""
    quick = ctx.quick
    steps, batch_size, seq_len, evals = (80, 16, 64, 8) if quick else (200, 16, 128, 10)
    runs: list[dict[str, Any]] = []
    if quick:
        runs.append(train_one("sinkgd", 1e-3, 0, steps, quick, batch_size, seq_len, evals))
        for lr in QUICK_ADAMW_LRS:
            runs.append(train_one("adamw", lr, 0, steps, quick, batch_size, seq_len, evals))
        best = {
            "sinkgd": 1e-3,
            "adamw": min((r for r in runs if r["name"] == "adamw"), key=lambda r: r["val_loss"])[
                "lr"
            ],
        }
    else:
        names = ["sinkgd", "adamw", "sgd", "swan"] + (["muon"] if muon_available() else [])
        for name in names:
            for lr in LR_GRID[name]:
                runs.append(train_one(name, lr, 0, steps, quick, batch_size, seq_len, evals))
        best = {
            name: min((r for r in runs if r["name"] == name), key=lambda r: r["val_loss"])["lr"]
            for name in names
        }
        for name in names:
            for seed in (1, 2):
                runs.append(
                    train_one(name, best[name], seed, steps, quick, batch_size, seq_len, evals)
                )

    # every (optimizer, lr) row, averaged over the seeds it has
    rows: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        rows.setdefault((r["name"], r["lr"]), []).append(r)
    adamw_best = rows[("adamw", best["adamw"])]
    adamw_loss = statistics.mean(r["val_loss"] for r in adamw_best)
    for (name, lr), rs in rows.items():
        losses = [r["val_loss"] for r in rs]
        mean = statistics.mean(losses)
        ctx.record(
            "val_loss",
            mean,
            "nats",
            baseline=f"AdamW lr={best['adamw']:g}",
            baseline_value=adamw_loss,
            optimizer=name,
            lr=lr,
            seeds=len(rs),
            std=round(statistics.stdev(losses), 4) if len(rs) > 1 else 0.0,
            ppl=round(math.exp(mean), 3),
            tokens=rs[0]["tokens"],
        )
    # tokens-to-target: per seed, SinkGD (best lr) against the AdamW run of the same seed
    ratios = []
    for seed in sorted({r["seed"] for r in rows[("sinkgd", best["sinkgd"])]}):
        sink = next(r for r in rows[("sinkgd", best["sinkgd"])] if r["seed"] == seed)
        adam = next((r for r in adamw_best if r["seed"] == seed), None)
        if adam is None:
            continue
        target = adam["curve"][-1][1]
        reached = tokens_to_target(sink["curve"], target)
        ratio = reached / adam["tokens"] if reached is not None else float("nan")
        ratios.append(ratio)
        ctx.record(
            "tokens_to_adamw_loss",
            ratio,
            "fraction of AdamW tokens",
            seed=seed,
            target_val_loss=round(target, 4),
            sinkgd_lr=best["sinkgd"],
            adamw_lr=best["adamw"],
        )
    finite = [r for r in ratios if not math.isnan(r)]
    if len(ratios) > 1:
        ctx.record(
            "tokens_to_adamw_loss_mean",
            statistics.mean(finite) if finite else float("nan"),
            "fraction of AdamW tokens",
            seeds=len(ratios),
            reached=len(finite),
        )
    # the curves of seed 0 at each optimizer's best lr
    curves = {
        f"{name} lr={lr:g}": [
            loss for _, loss in next(r for r in rows[(name, lr)] if r["seed"] == 0)["curve"]
        ]
        for name, lr in best.items()
    }
    x = [t / 1e3 for t, _ in runs[0]["curve"]]
    plot_lines(
        x,
        curves,
        ctx.path("quality_val_loss.png"),
        xlabel="training tokens (K)",
        ylabel="validation loss (nats/byte)",
        title=f"tiny Llama on stdlib bytes ({ctx.mode})",
    )


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


@SUITE.case("memory", kind="speed", modes=("quick", "full"))
def memory(ctx: Context) -> None:
    """Optimizer-state bytes: GaLore shapes (meta device) and the tiny model (measured)."""
    import sinkgd
    from neurips25_core.models import tiny_llama, tiny_llama_config

    sizes = ["60M", "130M"] if ctx.quick else list(GALORE_SHAPES)
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
    model = tiny_llama(_model_config(ctx.quick), seed=0)
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
    if not ctx.quick:
        from neurips25_core.bench import peak_rss_subprocess

        for which in ("adamw", "sinkgd", "sgd"):
            setup = (
                "import torch\nfrom neurips25_core.models import tiny_llama, tiny_llama_config\n"
                "from sinkgd.bench import make_optimizer, _model_config\n"
                "model = tiny_llama(_model_config(False), seed=0)\nx = torch.randint(0, 256, (16, 128))\n"
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


@SUITE.case("speed", kind="speed", modes=("quick", "full"))
def speed(ctx: Context) -> None:
    """Optimizer step time on CPU vs AdamW(foreach=True) on the same matrices, same run."""
    import sinkgd

    configs = {
        "tiny (spec 0.86M) matrices": _layer_shapes(128, 344, 4),
        "60M, one layer": _layer_shapes(512, 1376, 1),
    }
    if not ctx.quick:
        configs["130M, one layer"] = _layer_shapes(768, 2048, 1)
    labels, series = [], {}
    variants: dict[str, Callable[[list], torch.optim.Optimizer]] = {
        "SinkGD L=5": lambda ps: sinkgd.SinkGD(ps, lr=1e-3, num_iters=5, foreach=False),
        "SinkGD L=5 foreach": lambda ps: sinkgd.SinkGD(ps, lr=1e-3, num_iters=5, foreach=True),
        "SinkGD L=1": lambda ps: sinkgd.SinkGD(ps, lr=1e-3, num_iters=1, foreach=False),
        "SWAN": lambda ps: sinkgd.SWAN(ps, lr=1e-3),
        "SGD": lambda ps: torch.optim.SGD(ps, lr=1e-3, foreach=True),
    }
    # One intra-op thread: on a shared 2-core machine, multi-threaded timings of these small ops
    # measure the neighbours' load more than the optimizers (both sides get the same one thread).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _time_steps(ctx, configs, variants, labels, series)
    finally:
        torch.set_num_threads(threads)
    plot_bars(
        labels,
        series,
        ctx.path("speed_step_time.png"),
        ylabel="step time / AdamW(foreach) step time",
        title="optimizer step on CPU, 1 thread (lower is faster)",
    )


def _time_steps(ctx: Context, configs, variants, labels, series) -> None:
    for label, shapes in configs.items():
        params = _matrices(shapes)
        adam = torch.optim.AdamW(params, lr=1e-6, foreach=True)
        min_time = 0.3 if ctx.quick else 1.0
        labels.append(label)
        series.setdefault("AdamW foreach", []).append(1.0)
        for name, make in variants.items():
            if name == "SWAN" and ctx.quick and label != "tiny (spec 0.86M) matrices":
                series.setdefault(name, []).append(float("nan"))  # O(m²n): too slow for --quick
                continue
            opt = make(params)
            # the baseline is re-timed next to every variant, so both see the same machine load
            base = time_fn(adam.step, warmup=2, min_time=min_time).median
            t = time_fn(opt.step, warmup=2, min_time=min_time).median
            ctx.record(
                "step_time",
                t,
                "s",
                baseline="AdamW(foreach=True)",
                baseline_value=base,
                optimizer=name,
                shapes=label,
                matrices=len(shapes),
            )
            series.setdefault(name, []).append(t / base)
