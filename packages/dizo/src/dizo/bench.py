"""The dizo benchmark suite (``neurips25 bench dizo``).

Both quality cases fine-tune the spec's tiny OPT (pretrained on the stdlib minus ``email/`` and
``json/``, cached, built once per process and shared by the cases) with FO AdamW (the first-order
baseline), FO-LoRA (peft, the peer a user picks for memory; skipped when absent), MeZO (the
zeroth-order baseline DiZO beats in the paper), DiZO and MeZO-LoRA. Every arm gets an LR grid of
the same size and is compared at its best LR: one point each in smoke and quick (quick runs the
issue's arms MeZO, DiZO and FO-LoRA; its LRs come from the sweep ``DIZO_GRIDS=full neurips25
bench dizo --quick``, which runs quick's sizes on the full 3-point grids), three in full.

quality (``task_a_lm_adaptation``): adapt the LM to the held-out ``email/`` + ``json/`` families,
validation bits/byte (files split by file).
quality (``task_b_classification``): tell ``asyncio/`` from ``email/`` snippets by the label
byte's log-probability.
speed (``step_time``, smoke and full): step time of MeZO, DiZO (projection rounds amortised) and
FO AdamW, and the seeded perturbation against ``torch.normal`` + ``add_``.
speed (``peak_memory``, smoke and full): peak resident memory of one training step per arm
(fresh processes).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterator

import torch

from neurips25_core.bench import (
    Context,
    Suite,
    compare,
    peak_rss_subprocess,
    plot_bars,
    plot_lines,
    single_thread,
)
from neurips25_core.progress import progress_bar

SUITE = Suite(
    name="dizo",
    paper="Harmony in Divergence: Towards Fast, Accurate, and Memory-efficient Zeroth-order LLM Fine-tuning (DiZO)",
    url="https://arxiv.org/abs/2502.03304",
)

ZO_ARMS = ("mezo", "dizo", "mezo_lora")
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}
#: The issue's LR grids (3 points for every arm in full; the same budget for each arm).
FULL_GRIDS = {
    "fo_adamw": [1e-4, 3e-4, 1e-3],
    "fo_lora": [1e-3, 3e-3, 1e-2],
    "mezo": [1e-4, 3e-4, 1e-3],
    "dizo": [1e-4, 3e-4, 1e-3],
    "mezo_lora": [1e-3, 3e-3, 1e-2],
}
_BASES: dict[str, torch.nn.Module] = {}


def _base(ctx):
    """The pretrained tiny OPT of this mode, built once per process and shared by every case."""
    from .models import pretrained_opt

    if ctx.mode not in _BASES:
        _BASES[ctx.mode] = pretrained_opt(ctx.mode)
    return _BASES[ctx.mode]


def _has_peft() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def _lora(model, seed: int):
    """``model`` with peft LoRA adapters; their random init (A) drawn from ``seed``, not from
    whatever state earlier runs left the global RNG in (the user's RNG is restored after)."""
    from peft import LoraConfig, get_peft_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, LoraConfig(**LORA))


@dataclasses.dataclass
class _Task:
    """What a quality case trains on: the loss, seeded batches, and the evaluation."""

    name: str  # prefix of the artefacts: "task_a" / "task_b"
    loss_fn: Callable  # loss_fn(model, batch) -> scalar
    batches: Callable[[int], Iterator]  # seed -> an endless iterator of training batches
    evaluate: Callable[[torch.nn.Module], dict[str, float]]  # model -> {metric: value}
    metric: str  # the metric every arm is tuned and compared on (lower is better)
    unit: str
    extra: tuple[tuple[str, str, bool], ...] = ()  # (key, unit, lower_is_better) also recorded


def _run_arm(arm, base, lr, task: _Task, steps, seed, eval_every, start):
    """Train one arm from ``base``; ``start`` is the metrics of ``base`` (the same for every arm)."""
    from . import DiZO, DiZOConfig, MeZO, MeZOConfig, divergence

    model = copy.deepcopy(base)
    anchor = {k: v.detach().clone() for k, v in model.named_parameters()}
    it = task.batches(seed)
    if arm == "mezo":
        opt = MeZO(model, MeZOConfig(lr=lr, eps=1e-3, seed=seed))
    elif arm == "mezo_lora":  # MeZO's LoRA recipe: eps 1e-2
        model = _lora(model, seed)
        opt = MeZO(model, MeZOConfig(lr=lr, eps=1e-2, seed=seed))
    elif arm == "dizo":
        # projection batches come from a separate iterator over the training data (official code)
        opt = DiZO(model, DiZOConfig(lr=lr, eps=1e-3, seed=seed), task.batches(seed + 100))
    elif arm == "fo_lora":
        model = _lora(model, seed)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    elif arm == "fo_adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    else:
        raise ValueError(f"arm: unknown arm {arm!r}")
    # LoRA starts with B = 0, so every arm starts from the base's metrics
    curve = [{"step": 0, "forward_passes": 0, **start}]
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        b = next(it)
        if arm in ZO_ARMS:
            opt.step(task.loss_fn, b)
        else:
            model.train()
            with torch.enable_grad():
                opt.zero_grad(set_to_none=True)
                task.loss_fn(model, b).backward()
                opt.step()
            model.eval()
        if step % eval_every == 0 or step == steps:
            # FO charged 3 forward-pass equivalents per step (forward + backward ~ 2 forwards)
            fwd = opt.forward_passes if arm in ZO_ARMS else 3 * step
            curve.append({"step": step, "forward_passes": fwd, **task.evaluate(model)})
    seconds = time.perf_counter() - t0
    if arm in ("fo_lora", "mezo_lora"):
        div = {}  # base weights frozen: no displacement to analyse
    else:
        div = {k: list(v) for k, v in divergence(model, anchor).items()}
    return {"curve": curve, "seconds": seconds, "div": div}


def _layer_divergence(div: dict) -> dict[str, list[float]]:
    """Per decoder layer: the mean normalised divergence of its ``self_attn.{k,v}_proj.weight``."""
    out: dict[str, list[float]] = {}
    for name, v in div.items():
        if ".self_attn." in name and name.endswith("_proj.weight") and ".layers." in name:
            layer = int(name.split(".layers.")[1].split(".")[0])
            out.setdefault(str(layer), []).append(v[1])
    return {k: [sum(v) / len(v)] for k, v in sorted(out.items(), key=lambda kv: int(kv[0]))}


def _first_reaching(curve, target, metric, key):
    return next((c[key] for c in curve if c[metric] <= target), None)


def _grids(ctx: Context, quick: dict[str, list[float]]) -> dict[str, list[float]]:
    """Every arm's LR grid in this mode: smoke one LR each, ``quick`` as given, full the issue's."""
    if ctx.smoke:
        grids = {arm: [1e-3] for arm in FULL_GRIDS}
    elif ctx.quick and os.environ.get("DIZO_GRIDS") == "full":
        # the sweep that chose quick's LRs: quick sizes, the full grids of quick's arms
        grids = {arm: FULL_GRIDS[arm] for arm in quick}
    elif ctx.quick:
        grids = dict(quick)
    else:
        grids = dict(FULL_GRIDS)
    if not _has_peft():
        print("dizo bench: peft not installed (the `peers` extra); FO-LoRA and MeZO-LoRA skipped")
        grids.pop("fo_lora", None)
        grids.pop("mezo_lora", None)
    return grids


def _quality(ctx: Context, task: _Task, base, grids, steps, seeds, eval_every) -> dict:
    """Train every (arm, LR, seed), compare the arms at their best LR, record, save, plot."""
    from .analysis import divergence_cv

    m = task.metric
    start = task.evaluate(base)
    for key, unit, lower in ((m, task.unit, True), *task.extra):
        ctx.record(f"{key}_pretrained", start[key], unit, lower_is_better=lower)
    runs = {}
    total = sum(len(lrs) for lrs in grids.values()) * len(seeds)
    with single_thread(), progress_bar(total=total, desc=f"dizo {task.name}") as bar:
        for arm, lrs in grids.items():
            for lr in lrs:
                for seed in seeds:
                    runs[(arm, lr, seed)] = _run_arm(
                        arm, base, lr, task, steps, seed, eval_every, start
                    )
                    bar.update(1)

    def final(arm, lr, key=m):
        return sum(runs[(arm, lr, s)]["curve"][-1][key] for s in seeds) / len(seeds)

    summary: dict = {}
    keys = [m] + [k for k, _, _ in task.extra]
    for arm, lrs in grids.items():
        best = min(lrs, key=lambda lr, arm=arm: final(arm, lr))
        summary[arm] = {
            "best_lr": best,
            **{k: final(arm, best, k) for k in keys},
            **{
                f"{k}_std": _std([runs[(arm, best, s)]["curve"][-1][k] for s in seeds])
                for k in keys
            },
            "seconds_per_run": sum(runs[(arm, best, s)]["seconds"] for s in seeds) / len(seeds),
            "by_lr": {str(lr): {k: final(arm, lr, k) for k in keys} for lr in lrs},
            "curve": runs[(arm, best, seeds[0])]["curve"],
        }
        div = runs[(arm, best, seeds[0])]["div"]
        attn = {k: v for k, v in div.items() if ".self_attn." in k and k.endswith("_proj.weight")}
        if len(attn) >= 2:
            summary[arm]["divergence_cv_attn"] = divergence_cv(attn)
            summary[arm]["layer_divergence"] = _layer_divergence(div)
            ctx.record(f"divergence_cv_attn_{arm}", divergence_cv(attn), "cv")
    for arm in grids:  # recorded against MeZO, the baseline DiZO improves on
        for key, unit, lower in ((m, task.unit, True), *task.extra):
            ctx.record(
                f"{key}_{arm}",
                summary[arm][key],
                unit,
                baseline="mezo" if arm != "mezo" else None,
                baseline_value=summary["mezo"][key] if arm != "mezo" else None,
                lower_is_better=lower,
                best_lr=summary[arm]["best_lr"],
                steps=steps,
                seeds=len(seeds),
            )
    # forward passes (DiZO's projection rounds included) to MeZO's final metric, against the
    # passes MeZO itself needed to first reach it (its curve may dip below its end point early)
    target = summary["mezo"][m]
    mezo_curve, dizo_curve = summary["mezo"]["curve"], summary["dizo"]["curve"]
    mezo_reach = _first_reaching(mezo_curve, target, m, "forward_passes")
    reach = _first_reaching(dizo_curve, target, m, "forward_passes")
    summary["dizo_vs_mezo"] = {
        "mezo_final": target,
        "mezo_forward_passes_total": mezo_curve[-1]["forward_passes"],
        "mezo_forward_passes_to_own_final": mezo_reach,
        "dizo_forward_passes_to_mezo_final": reach,
        "dizo_steps_to_mezo_final": _first_reaching(dizo_curve, target, m, "step"),
        "mezo_steps_to_own_final": _first_reaching(mezo_curve, target, m, "step"),
        "eval_every": eval_every,
    }
    ctx.record(
        "dizo_forward_passes_to_mezo_final",
        float(reach) if reach is not None else math.nan,
        "forward passes",
        baseline="mezo",
        baseline_value=float(mezo_reach),
        reached=reach is not None,
        resolution_steps=eval_every,
    )
    meta = getattr(base, "neurips25_meta", {})
    ctx.path(f"{task.name}_runs.json").write_text(
        json.dumps(
            {
                "pretrained": {
                    **start,
                    "val_bpb": meta.get("val_bpb"),
                    "cached": meta.get("cached"),
                },
                "steps": steps,
                "seeds": seeds,
                "grids": grids,
                "summary": summary,
                "runs": {f"{a}|{lr}|{s}": r for (a, lr, s), r in runs.items()},
            },
            indent=1,
        )
    )
    _plots(ctx, task, summary, list(grids), seeds[0])
    return summary


def _plots(ctx, task: _Task, summary, arms, seed) -> None:
    m = task.metric
    xs = [c["step"] for c in summary["mezo"]["curve"]]
    for key, unit, _ in ((m, task.unit, True), *task.extra):
        plot_lines(
            xs,
            {a: [c[key] for c in summary[a]["curve"]] for a in arms},
            ctx.path(f"{task.name}_{key}_vs_steps.png"),
            xlabel="step",
            ylabel=f"{key} ({unit})",
            title=f"{task.name}, best LR per arm, seed {seed}",
        )
    # every arm on its own forward-pass axis: DiZO charged for its projection rounds (~1.2x
    # MeZO per step), FO for forward + backward (3 forward-pass equivalents per step)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for a in arms:
        curve = summary[a]["curve"]
        ax.plot([c["forward_passes"] for c in curve], [c[m] for c in curve], marker="o", label=a)
    ax.set_xlabel("forward passes (DiZO's rounds counted; FO = 3 per step)")
    ax.set_ylabel(f"{m} ({task.unit})")
    ax.set_title(f"{task.name}: against forward passes")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.path(f"{task.name}_{m}_vs_forward_passes.png"))
    plt.close(fig)
    layers = [a for a in ("fo_adamw", "mezo", "dizo") if "layer_divergence" in summary.get(a, {})]
    if layers:
        names = list(summary[layers[0]]["layer_divergence"])
        plot_bars(
            [f"layer {n}" for n in names],
            {a: [summary[a]["layer_divergence"][n][0] for n in names] for a in layers},
            ctx.path(f"{task.name}_layer_divergence.png"),
            ylabel="||theta_l - theta_l^0|| / sqrt(n_l)  (k/v proj)",
            title=f"{task.name}: per-layer divergence",
            logy=True,
        )


def task_a(seq_len: int, eval_batches: int, batch: int = 16) -> _Task:
    """Task A: LM adaptation to the held-out families, scored in validation bits/byte."""
    from .models import held_out_corpus
    from .tasks import evaluate_lm, lm_loss

    corpus = held_out_corpus()
    return _Task(
        name="task_a",
        loss_fn=lm_loss,
        batches=lambda seed: corpus.batches("train", batch, seq_len, seed=seed),
        evaluate=lambda model: {"eval_bpb": evaluate_lm(model, corpus, seq_len, eval_batches)},
        metric="eval_bpb",
        unit="bits/byte",
    )


def task_b(n_train: int, n_eval: int, batch: int = 16) -> _Task:
    """Task B: ``asyncio/`` vs ``email/`` snippets by the label byte's log-probability."""
    from .tasks import classification_loss, evaluate, snippet_task

    (x, y), ev = snippet_task(n_train, n_eval, seed=0)

    def batches(seed):
        gen = torch.Generator().manual_seed(seed)
        while True:
            idx = torch.randint(len(y), (batch,), generator=gen)
            yield x[idx], y[idx]

    def metrics(model):
        loss, acc = evaluate(model, ev)
        return {"eval_loss": loss, "eval_acc": acc}

    return _Task(
        name="task_b",
        loss_fn=classification_loss,
        batches=batches,
        evaluate=metrics,
        metric="eval_loss",
        unit="nats",
        extra=(("eval_acc", "fraction", False),),
    )


@SUITE.case("task_a_lm_adaptation", kind="quality")
def task_a_lm_adaptation(ctx: Context) -> None:
    """Adapt the LM to the held-out email/ + json/ families; validation bits/byte vs steps."""
    base = _base(ctx)
    task = task_a(
        seq_len=ctx.pick(smoke=32, quick=32, full=64),
        eval_batches=ctx.pick(smoke=2, quick=8, full=32),
    )
    # quick: the quick arms at one LR each, each arm's best of its full grid in the
    # quick-size sweep (README); full: every arm on its 3-point grid
    grids = _grids(ctx, quick={"mezo": [1e-3], "dizo": [1e-3], "fo_lora": [1e-2]})
    _quality(
        ctx,
        task,
        base,
        grids,
        steps=ctx.pick(smoke=6, quick=60, full=3000),
        seeds=ctx.pick(smoke=[0], quick=[0], full=[0, 1, 2]),
        eval_every=ctx.pick(smoke=3, quick=20, full=250),
    )


@SUITE.case("task_b_classification", kind="quality")
def task_b_classification(ctx: Context) -> None:
    """Fine-tune on asyncio/ vs email/ snippets; loss/accuracy vs steps and forward passes."""
    base = _base(ctx)
    task = task_b(*ctx.pick(smoke=(64, 64), quick=(512, 256), full=(512, 1000)))
    # quick: the three arms at one LR each, each arm's best of its full grid in the
    # quick-size sweep (README, results/quick_lr_sweep)
    grids = _grids(ctx, quick={"mezo": [1e-3], "dizo": [1e-3], "fo_lora": [1e-3]})
    _quality(
        ctx,
        task,
        base,
        grids,
        steps=ctx.pick(smoke=6, quick=60, full=3000),
        seeds=ctx.pick(smoke=[0], quick=[0], full=[0, 1, 2]),
        eval_every=ctx.pick(smoke=3, quick=30, full=250),
    )


def _std(xs):
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / len(xs)) ** 0.5


@SUITE.case("step_time", kind="speed", modes=("smoke", "full"))
def step_time(ctx: Context) -> None:
    """Per-step wall time: MeZO and DiZO (rounds amortised) against one FO AdamW step.

    Not in ``--quick``, which has room for the two quality cases only (a minute of CPU, a third
    of it importing torch, transformers and peft); ``--full --case step_time`` runs it.
    """
    from . import DiZO, DiZOConfig, MeZO, MeZOConfig, ops
    from .tasks import classification_loss, snippet_task

    base = _base(ctx)
    (x, y), _ = snippet_task(64, 2, seed=0)
    b = (x[:16], y[:16])
    mezo_m, dizo_m, fo_m = (copy.deepcopy(base) for _ in range(3))
    mezo = MeZO(mezo_m, MeZOConfig(lr=1e-6))
    dizo = DiZO(dizo_m, DiZOConfig(lr=1e-6, interval=50), [b])
    adam = torch.optim.AdamW(fo_m.parameters(), lr=1e-6)

    def fo():
        with torch.enable_grad():
            adam.zero_grad(set_to_none=True)
            classification_loss(fo_m, b).backward()
            adam.step()

    def dizo_amortised():  # a step; every 50th call also runs a round (2R = 20 forwards)
        dizo.step(classification_loss, b)

    with single_thread():
        res = compare(
            {
                "fo_adamw": fo,
                "mezo": lambda: mezo.step(classification_loss, b),
                "dizo": dizo_amortised,
            },
            baseline="mezo",
            min_time=ctx.pick(smoke=0.05, quick=1.5, full=10.0),
            max_time=ctx.pick(smoke=1.0, quick=4.0, full=60.0),
        )
    res.record(ctx, batch=16, seq=66, params=sum(p.numel() for p in base.parameters()))
    params = [p.detach().clone() for p in base.parameters()]

    def normal_add():
        for p in params:
            p.add_(torch.normal(0.0, 1.0, p.shape), alpha=1e-3)

    with single_thread():
        res2 = compare(
            {
                "perturb_": lambda: ops.perturb_(params, 1, 1e-3, backend="torch"),
                "torch.normal+add_": normal_add,
            },
            baseline="torch.normal+add_",
            min_time=ctx.pick(smoke=0.05, quick=0.5, full=5.0),
            max_time=ctx.pick(smoke=1.0, quick=1.5, full=20.0),
        )
    res2.record(ctx, elements=sum(p.numel() for p in params))


_MEM_SETUP = """
import torch
from neurips25_core.bench import single_thread
from dizo import DiZO, DiZOConfig, MeZO, MeZOConfig
from dizo.tasks import classification_loss
torch.manual_seed(0)
arm = {arm!r}
if {smoke}:
    # smoke: a torch-only stand-in (importing transformers/peft in a fresh process takes ~15 s)
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k_proj = torch.nn.Linear(16, 16)
            self.v_proj = torch.nn.Linear(16, 16)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(256, 16)
            self.self_attn = Attn()
            self.head = torch.nn.Linear(16, 256)

        def forward(self, input_ids):
            h = self.embed_tokens(input_ids)
            h = h + self.self_attn.v_proj(torch.tanh(self.self_attn.k_proj(h)))
            return type("Out", (), {{"logits": self.head(h)}})

    model = Tiny()
else:
    from transformers import OPTForCausalLM
    from dizo.models import opt_config
    model = OPTForCausalLM(opt_config())
model.eval()
b = (torch.randint(0, 256, ({batch}, 66)), torch.randint(0, 2, ({batch},)))
if arm in ("fo_lora", "mezo_lora"):
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(model, LoraConfig(**{lora!r}))
if arm == "mezo" or arm == "mezo_lora":
    opt = MeZO(model, MeZOConfig(lr=1e-6))
elif arm == "dizo":
    opt = DiZO(model, DiZOConfig(lr=1e-6, interval=1, proj_iters=2), [b])
elif arm in ("fo_adamw", "fo_lora"):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
"""

_MEM_CODE = """
with single_thread():
    for _ in range(2):
        if arm == "inference":
            with torch.no_grad():
                classification_loss(model, b)
        elif arm in ("mezo", "dizo", "mezo_lora"):
            opt.step(classification_loss, b)
        else:
            opt.zero_grad(set_to_none=True)
            classification_loss(model, b).backward()
            opt.step()
"""


@SUITE.case("peak_memory", kind="speed", modes=("smoke", "full"))
def peak_memory(ctx: Context) -> None:
    """Peak RSS above the loaded model of two training steps per arm (one fresh process each).

    DiZO runs a projection round every step here (interval 1), so its anchor copies are counted.
    Not in ``--quick``: every fresh process imports transformers (about 14 s of CPU each), so
    the five arms alone would take the quick run past a minute; run it with
    ``neurips25 bench dizo --full --case peak_memory`` (about two minutes).
    """
    from .models import OPT_TINY

    if ctx.smoke:  # a torch-only stand-in model; FO-LoRA needs peft (a slow import) and is left out
        arms = ["mezo", "dizo", "fo_adamw"]
        cfg = "torch-only width-16 stand-in"
    else:
        arms = ["inference", "mezo", "dizo", "fo_adamw"]
        cfg = f"OPT {OPT_TINY}"
        if _has_peft():
            arms.append("fo_lora")
            if ctx.full:
                arms.append("mezo_lora")
        else:
            print("dizo bench: peft not installed (the `peers` extra); FO-LoRA memory skipped")
    batch = 16
    mib = {}
    for arm in arms:
        setup = _MEM_SETUP.format(smoke=bool(ctx.smoke), batch=batch, arm=arm, lora=LORA)
        mib[arm] = peak_rss_subprocess(_MEM_CODE, setup)["delta"] / 2**20
    for arm in arms:
        ctx.record(
            f"peak_rss_delta_{arm}",
            mib[arm],
            "MiB",
            baseline="fo_adamw" if arm != "fo_adamw" else None,
            baseline_value=mib["fo_adamw"] if arm != "fo_adamw" else None,
            batch=batch,
            seq=66,
            model=cfg,
        )
