"""The dizo benchmark suite (``neurips25 bench dizo``).

quality: task B (asyncio/ vs email/ snippets) fine-tuning the core's pretrained tiny Llama with
FO AdamW, FO-LoRA (peft, skipped when absent), MeZO and DiZO, each with the same LR-grid size.
speed: step time of MeZO / DiZO (projection rounds amortised) / FO AdamW, and the seeded
perturbation against ``torch.normal`` + ``add_``.
"""

from __future__ import annotations

import copy
import json
import time

import torch

from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread

SUITE = Suite(
    name="dizo",
    paper="Harmony in Divergence: Towards Fast, Accurate, and Memory-efficient Zeroth-order LLM Fine-tuning (DiZO)",
    url="https://arxiv.org/abs/2502.03304",
)


def _base(ctx):
    from neurips25_core.models import pretrained_tiny_llama_for

    return pretrained_tiny_llama_for(ctx.mode, progress=False)


def _run_arm(arm, base, lr, train, ev, steps, batch, seed, eval_every):
    from . import DiZO, DiZOConfig, MeZO, MeZOConfig, divergence
    from .tasks import classification_loss, evaluate

    model = copy.deepcopy(base)
    anchor = {k: v.detach().clone() for k, v in model.named_parameters()}
    g = torch.Generator().manual_seed(seed)
    x, y = train

    def batches(gen):
        while True:
            idx = torch.randint(len(y), (batch,), generator=gen)
            yield x[idx], y[idx]

    it = batches(g)
    if arm == "mezo":
        opt = MeZO(model, MeZOConfig(lr=lr, eps=1e-3, seed=seed))
    elif arm == "dizo":
        opt = DiZO(
            model,
            DiZOConfig(lr=lr, eps=1e-3, seed=seed),
            batches(torch.Generator().manual_seed(seed + 100)),
        )
    elif arm == "fo_lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
        )
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    curve = []
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        b = next(it)
        if arm in ("mezo", "dizo"):
            opt.step(classification_loss, b)
        else:
            model.train()
            with torch.enable_grad():
                opt.zero_grad(set_to_none=True)
                classification_loss(model, b).backward()
                opt.step()
        if step % eval_every == 0 or step == steps:
            loss, acc = evaluate(model, ev)
            fwd = (
                opt.forward_passes if arm in ("mezo", "dizo") else 3 * step
            )  # FO: fwd + bwd ~ 3 fwd
            curve.append({"step": step, "forward_passes": fwd, "eval_loss": loss, "eval_acc": acc})
    seconds = time.perf_counter() - t0
    div = (
        divergence(model if arm != "fo_lora" else model.base_model.model, anchor)
        if arm != "fo_lora"
        else {}
    )
    return curve, seconds, div


@SUITE.case("task_b_classification", kind="quality")
def task_b_classification(ctx: Context) -> None:
    """Fine-tune on asyncio/ vs email/ snippets; loss/accuracy vs steps and forward passes."""
    from .analysis import divergence_cv
    from .tasks import evaluate, snippet_task

    base = _base(ctx)
    steps = ctx.pick(smoke=6, quick=200, full=3000)
    batch = 16
    n_train, n_eval = ctx.pick(smoke=(64, 64), quick=(512, 400), full=(512, 1000))
    seeds = ctx.pick(smoke=[0], quick=[0], full=[0, 1, 2])
    eval_every = ctx.pick(smoke=3, quick=50, full=250)
    grids = {
        "fo_adamw": ctx.pick(smoke=[1e-3], quick=[3e-4, 1e-3], full=[1e-4, 3e-4, 1e-3]),
        "mezo": ctx.pick(smoke=[1e-3], quick=[3e-4, 1e-3], full=[1e-4, 3e-4, 1e-3]),
        "dizo": ctx.pick(smoke=[1e-3], quick=[3e-4, 1e-3], full=[1e-4, 3e-4, 1e-3]),
        "fo_lora": ctx.pick(smoke=[1e-3], quick=[1e-3, 3e-3], full=[3e-4, 1e-3, 3e-3]),
    }
    try:
        import peft  # noqa: F401
    except ImportError:
        print("dizo bench: peft not installed (the `peers` extra); FO-LoRA arm skipped")
        grids.pop("fo_lora")
    train, ev = snippet_task(n_train, n_eval, seed=0)
    loss0, acc0 = evaluate(base, ev)
    ctx.record("eval_acc_pretrained", acc0, "fraction", lower_is_better=False)
    runs = {}
    with single_thread():
        for arm, lrs in grids.items():
            for lr in lrs:
                for seed in seeds:
                    curve, secs, div = _run_arm(
                        arm, base, lr, train, ev, steps, batch, seed, eval_every
                    )
                    runs[(arm, lr, seed)] = {"curve": curve, "seconds": secs, "div": div}
    summary = {}
    for arm, lrs in grids.items():
        best = min(
            lrs, key=lambda lr: sum(runs[(arm, lr, s)]["curve"][-1]["eval_loss"] for s in seeds)
        )
        final = [runs[(arm, best, s)]["curve"][-1] for s in seeds]
        loss = sum(f["eval_loss"] for f in final) / len(final)
        acc = sum(f["eval_acc"] for f in final) / len(final)
        summary[arm] = {
            "best_lr": best,
            "eval_loss": loss,
            "eval_acc": acc,
            "curve": runs[(arm, best, seeds[0])]["curve"],
        }
        divs = runs[(arm, best, seeds[0])]["div"]
        kv = {k: v for k, v in divs.items() if "self_attn" in k and k.endswith("weight")}
        if len(kv) >= 2:
            summary[arm]["divergence_cv_attn"] = divergence_cv(kv)
            summary[arm]["divergence"] = {k: v[1] for k, v in kv.items()}
        ctx.record(
            f"eval_loss_{arm}",
            loss,
            "nats",
            baseline="mezo",
            baseline_value=None,
            best_lr=best,
            steps=steps,
        )
        ctx.record(
            f"eval_acc_{arm}", acc, "fraction", lower_is_better=False, best_lr=best, steps=steps
        )
    # DiZO's forward passes to MeZO's final eval loss (DiZO charged for its projection rounds)
    target = summary["mezo"]["eval_loss"]
    reach = next(
        (c["forward_passes"] for c in summary["dizo"]["curve"] if c["eval_loss"] <= target), None
    )
    mezo_fwd = summary["mezo"]["curve"][-1]["forward_passes"]
    ctx.record(
        "dizo_forward_passes_to_mezo_final",
        float(reach) if reach is not None else float("nan"),
        "forward passes",
        baseline="mezo",
        baseline_value=float(mezo_fwd),
    )
    for arm in ("dizo", "mezo"):
        if "divergence_cv_attn" in summary[arm]:
            ctx.record(
                f"divergence_cv_attn_{arm}",
                summary[arm]["divergence_cv_attn"],
                "cv",
                lower_is_better=False,
            )
    ctx.path("task_b_runs.json").write_text(
        json.dumps({"pretrained": [loss0, acc0], "summary": summary}, indent=1)
    )
    xs = [c["step"] for c in summary["mezo"]["curve"]]
    series = {arm: [c["eval_loss"] for c in s["curve"]] for arm, s in summary.items()}
    plot_lines(
        xs,
        series,
        ctx.path("task_b_loss_vs_steps.png"),
        xlabel="step",
        ylabel="eval loss",
        title="task B (best LR per arm)",
    )


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

    def dizo_amortised():  # one step plus 1/interval of a projection round (2R forwards / 50)
        dizo.step(classification_loss, b)

    with single_thread():
        res = compare(
            {
                "fo_adamw": fo,
                "mezo": lambda: mezo.step(classification_loss, b),
                "dizo": dizo_amortised,
            },
            baseline="mezo",
            min_time=ctx.pick(smoke=0.05, quick=2.0, full=10.0),
            max_time=ctx.pick(smoke=1.0, quick=8.0, full=60.0),
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
            min_time=ctx.pick(smoke=0.05, quick=1.0, full=5.0),
            max_time=ctx.pick(smoke=1.0, quick=4.0, full=20.0),
        )
    res2.record(ctx, elements=sum(p.numel() for p in params))
