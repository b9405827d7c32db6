"""The dizo benchmark suite (``neurips25 bench dizo``).

quality (``task_b_classification``): the spec's tiny OPT (pretrained on the stdlib minus
``email/`` and ``json/``, cached) fine-tuned to tell ``asyncio/`` from ``email/`` snippets by the
label byte's log-probability, with FO AdamW (the first-order baseline), FO-LoRA (peft, the peer a
user picks for memory; skipped when absent), MeZO (the zeroth-order baseline DiZO beats in the
paper), DiZO, and in full mode MeZO-LoRA; every arm gets an LR grid of the same size and is
compared at its best LR.
speed (``step_time``): step time of MeZO, DiZO (projection rounds amortised) and FO AdamW, and
the seeded perturbation against ``torch.normal`` + ``add_``.
speed (``peak_memory``, smoke and full only): peak resident memory of one training step per arm
(fresh processes).
"""

from __future__ import annotations

import copy
import json
import math
import time

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

SUITE = Suite(
    name="dizo",
    paper="Harmony in Divergence: Towards Fast, Accurate, and Memory-efficient Zeroth-order LLM Fine-tuning (DiZO)",
    url="https://arxiv.org/abs/2502.03304",
)

ZO_ARMS = ("mezo", "dizo", "mezo_lora")
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}


def _base(ctx):
    from .models import pretrained_opt

    return pretrained_opt(ctx.mode)


def _has_peft() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def _lora(model):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(**LORA))


def _run_arm(arm, base, lr, train, ev, steps, batch, seed, eval_every):
    from . import DiZO, DiZOConfig, MeZO, MeZOConfig, divergence
    from .tasks import classification_loss, evaluate

    model = copy.deepcopy(base)
    anchor = {k: v.detach().clone() for k, v in model.named_parameters()}
    x, y = train

    def batches(gen):
        while True:
            idx = torch.randint(len(y), (batch,), generator=gen)
            yield x[idx], y[idx]

    it = batches(torch.Generator().manual_seed(seed))
    if arm == "mezo":
        opt = MeZO(model, MeZOConfig(lr=lr, eps=1e-3, seed=seed))
    elif arm == "mezo_lora":  # MeZO's LoRA recipe: eps 1e-2
        model = _lora(model)
        opt = MeZO(model, MeZOConfig(lr=lr, eps=1e-2, seed=seed))
    elif arm == "dizo":
        # projection batches come from a separate iterator over the training data (official code)
        opt = DiZO(
            model,
            DiZOConfig(lr=lr, eps=1e-3, seed=seed),
            batches(torch.Generator().manual_seed(seed + 100)),
        )
    elif arm == "fo_lora":
        model = _lora(model)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    elif arm == "fo_adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    else:
        raise ValueError(f"arm: unknown arm {arm!r}")
    loss0, acc0 = evaluate(model, ev)
    curve = [{"step": 0, "forward_passes": 0, "eval_loss": loss0, "eval_acc": acc0}]
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        b = next(it)
        if arm in ZO_ARMS:
            opt.step(classification_loss, b)
        else:
            model.train()
            with torch.enable_grad():
                opt.zero_grad(set_to_none=True)
                classification_loss(model, b).backward()
                opt.step()
        if step % eval_every == 0 or step == steps:
            loss, acc = evaluate(model, ev)
            # FO charged 3 forward-pass equivalents per step (forward + backward ~ 2 forwards)
            fwd = opt.forward_passes if arm in ZO_ARMS else 3 * step
            curve.append({"step": step, "forward_passes": fwd, "eval_loss": loss, "eval_acc": acc})
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


def _first_reaching(curve, target, key):
    return next((c[key] for c in curve if c["eval_loss"] <= target), None)


@SUITE.case("task_b_classification", kind="quality")
def task_b_classification(ctx: Context) -> None:
    """Fine-tune on asyncio/ vs email/ snippets; loss/accuracy vs steps and forward passes."""
    from .analysis import divergence_cv
    from .tasks import evaluate, snippet_task

    t_start = time.perf_counter()
    base = _base(ctx)
    pretrain_seconds = time.perf_counter() - t_start
    steps = ctx.pick(smoke=6, quick=300, full=3000)
    batch = 16
    n_train, n_eval = ctx.pick(smoke=(64, 64), quick=(512, 256), full=(512, 1000))
    seeds = ctx.pick(smoke=[0], quick=[0], full=[0, 1, 2])
    eval_every = ctx.pick(smoke=3, quick=60, full=250)
    # equal grid sizes for every arm (the baselines get the same tuning budget as DiZO). quick
    # runs the three arms at one LR each (1e-3: every arm's best of the 2-point grid in
    # the earlier 300-step run, results/earlier_quick_d8979c4), so it fits in a minute.
    zo = ctx.pick(smoke=[1e-3], quick=[1e-3], full=[1e-4, 3e-4, 1e-3])
    grids = {
        "fo_adamw": ctx.pick(smoke=[1e-3], quick=None, full=[1e-4, 3e-4, 1e-3]),
        "fo_lora": ctx.pick(smoke=[1e-3], quick=[1e-3], full=[1e-3, 3e-3, 1e-2]),
        "mezo": zo,
        "dizo": zo,
    }
    if ctx.quick:  # the quick arms: MeZO, DiZO, FO-LoRA
        grids.pop("fo_adamw")
    if not ctx.quick:
        grids["mezo_lora"] = ctx.pick(smoke=[1e-3], quick=None, full=[1e-3, 3e-3, 1e-2])
    if not _has_peft():
        print("dizo bench: peft not installed (the `peers` extra); FO-LoRA and MeZO-LoRA skipped")
        grids.pop("fo_lora")
        grids.pop("mezo_lora", None)
    train, ev = snippet_task(n_train, n_eval, seed=0)
    loss0, acc0 = evaluate(base, ev)
    ctx.record("eval_loss_pretrained", loss0, "nats")
    ctx.record("eval_acc_pretrained", acc0, "fraction", lower_is_better=False)
    runs = {}
    with single_thread():
        for arm, lrs in grids.items():
            for lr in lrs:
                for seed in seeds:
                    runs[(arm, lr, seed)] = _run_arm(
                        arm, base, lr, train, ev, steps, batch, seed, eval_every
                    )
    summary = {}
    for arm, lrs in grids.items():

        def final(lr, key="eval_loss", arm=arm):
            return sum(runs[(arm, lr, s)]["curve"][-1][key] for s in seeds) / len(seeds)

        best = min(lrs, key=final)
        summary[arm] = {
            "best_lr": best,
            "eval_loss": final(best),
            "eval_acc": final(best, "eval_acc"),
            "eval_loss_std": _std([runs[(arm, best, s)]["curve"][-1]["eval_loss"] for s in seeds]),
            "eval_acc_std": _std([runs[(arm, best, s)]["curve"][-1]["eval_acc"] for s in seeds]),
            "seconds_per_run": sum(runs[(arm, best, s)]["seconds"] for s in seeds) / len(seeds),
            "by_lr": {
                str(lr): {"eval_loss": final(lr), "eval_acc": final(lr, "eval_acc")} for lr in lrs
            },
            "curve": runs[(arm, best, seeds[0])]["curve"],
        }
        div = runs[(arm, best, seeds[0])]["div"]
        attn = {k: v for k, v in div.items() if ".self_attn." in k and k.endswith("_proj.weight")}
        if len(attn) >= 2:
            summary[arm]["divergence_cv_attn"] = divergence_cv(attn)
            summary[arm]["layer_divergence"] = _layer_divergence(div)
            ctx.record(f"divergence_cv_attn_{arm}", divergence_cv(attn), "cv")
    for arm in grids:  # recorded against MeZO, the baseline DiZO improves on
        for key, unit, lower in (("eval_loss", "nats", True), ("eval_acc", "fraction", False)):
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
    # DiZO's forward passes (projection rounds included) to MeZO's final eval loss
    target = summary["mezo"]["eval_loss"]
    mezo_fwd = summary["mezo"]["curve"][-1]["forward_passes"]
    reach = _first_reaching(summary["dizo"]["curve"], target, "forward_passes")
    reach_step = _first_reaching(summary["dizo"]["curve"], target, "step")
    summary["dizo_vs_mezo"] = {
        "mezo_final_eval_loss": target,
        "mezo_forward_passes": mezo_fwd,
        "dizo_forward_passes_to_mezo_final": reach,
        "dizo_steps_to_mezo_final": reach_step,
        "eval_every": eval_every,
    }
    ctx.record(
        "dizo_forward_passes_to_mezo_final",
        float(reach) if reach is not None else math.nan,
        "forward passes",
        baseline="mezo",
        baseline_value=float(mezo_fwd),
        reached=reach is not None,
        resolution_steps=eval_every,
    )
    meta = getattr(base, "neurips25_meta", {})
    ctx.path("task_b_runs.json").write_text(
        json.dumps(
            {
                "pretrained": {
                    "eval_loss": loss0,
                    "eval_acc": acc0,
                    "val_bpb": meta.get("val_bpb"),
                    "cached": meta.get("cached"),
                    "seconds": pretrain_seconds,
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
    arms = [a for a in grids]
    xs = [c["step"] for c in summary["mezo"]["curve"]]
    plot_lines(
        xs,
        {a: [c["eval_loss"] for c in summary[a]["curve"]] for a in arms},
        ctx.path("task_b_loss_vs_steps.png"),
        xlabel="step",
        ylabel="eval loss (nats)",
        title=f"task B, best LR per arm, seed {seeds[0]}",
    )
    plot_lines(
        xs,
        {a: [c["eval_acc"] for c in summary[a]["curve"]] for a in arms},
        ctx.path("task_b_acc_vs_steps.png"),
        xlabel="step",
        ylabel="eval accuracy",
        title=f"task B, best LR per arm, seed {seeds[0]}",
    )
    # forward passes: DiZO's x axis includes its projection rounds (about 1.2x MeZO's per step)
    zo_arms = [a for a in ("mezo", "dizo") if a in summary]
    plot_lines(
        [c["forward_passes"] for c in summary["mezo"]["curve"]],
        {a: [c["eval_loss"] for c in summary[a]["curve"]] for a in zo_arms},
        ctx.path("task_b_loss_vs_forward_passes_mezo_axis.png"),
        xlabel="forward passes (MeZO's count; DiZO's points at the same steps cost 1.2x)",
        ylabel="eval loss (nats)",
        title="MeZO vs DiZO",
    )
    layers = [a for a in ("fo_adamw", "mezo", "dizo") if "layer_divergence" in summary.get(a, {})]
    if layers:
        names = list(summary[layers[0]]["layer_divergence"])
        plot_bars(
            [f"layer {n}" for n in names],
            {a: [summary[a]["layer_divergence"][n][0] for n in names] for a in layers},
            ctx.path("task_b_layer_divergence.png"),
            ylabel="||theta_l - theta_l^0|| / sqrt(n_l)  (k/v proj)",
            title="per-layer divergence",
            logy=True,
        )


def _std(xs):
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / len(xs)) ** 0.5


@SUITE.case("step_time", kind="speed")
def step_time(ctx: Context) -> None:
    """Per-step wall time: MeZO and DiZO (rounds amortised) against one FO AdamW step."""
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
