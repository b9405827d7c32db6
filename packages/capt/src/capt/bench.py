"""The capt benchmark suite (``neurips25 bench capt``).

* ``step_time`` (speed, CPU, one thread): one AdamW training step of a frozen random-weight Llama
  for CaPT against prompt tuning PT(20) (the baseline the paper beats), PT(100), deep PT(10) and
  peft's PT(20) and LoRA r=4 (the ``peers`` extra, skipped with a message when absent); our PT(20)
  is checked equal to peft's with the same prompts before anything is timed. Peak live tensor
  bytes of each step (:func:`neurips25_core.bench.peak_live_bytes`) and the hook cost: a no-grad
  forward of CaPT against the bare model.
* ``quality`` (the reduced reproduction, :mod:`capt.quality`): the stdlib tasks T1-T3
  (:mod:`capt.tasks`) on the pretrained byte Llama; every arm's learning rate swept on T1 seed 0
  (the same three-point grid for every arm, LoRA on its own scale), selected on a validation set,
  then every task and seed at the selected rate: accuracy (mean ± 95 % CI), trainable parameters,
  step time, Finding II (PT(20) + the instance token at test time) and the per-layer attention
  the input puts on slot 0 (CaPT) against PT's first slot. ``--quick`` is the issue's: T1, width
  64, CaPT vs peft PT(20) and LoRA, 150 steps, one seed, no sweep.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import torch

from neurips25_core.bench import Context, Suite, compare, peak_live_bytes, plot_bars, single_thread
from neurips25_core.parallel import process_map, workers_from_env

from .quality import ARMS

SUITE = Suite(
    name="capt",
    paper="All You Need is One: Capsule Prompt Tuning with a Single Vector",
    url="https://arxiv.org/abs/2510.16670",
)


# ------------------------------------------------------------------------------------ speed
def _random_llama(hidden: int, layers: int, seed: int = 0):
    from neurips25_core.models import tiny_llama, tiny_llama_config

    config = tiny_llama_config(hidden_size=hidden, num_layers=layers, num_heads=4)
    model = tiny_llama(config, seed=seed).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _speed_arms(ctx: Context, hidden: int, layers: int) -> dict:
    from . import CapsuleConfig, DeepPromptTuning, PromptTuning, get_peft_model
    from .quality import peft_available

    g = torch.Generator().manual_seed(0)
    arms = {
        "capt": get_peft_model(_random_llama(hidden, layers), CapsuleConfig(init="normal")),
        "pt20": get_peft_model(_random_llama(hidden, layers), PromptTuning(20), generator=g),
        "pt100": get_peft_model(_random_llama(hidden, layers), PromptTuning(100), generator=g),
        "deep_pt10": get_peft_model(_random_llama(hidden, layers), DeepPromptTuning(10)),
    }
    if ctx.smoke:
        # Wrapping with peft is slow to set up on a loaded machine (seconds of lazy imports);
        # the smoke quality case and tests/test_baselines.py build and run peft's arms.
        ctx.log("step_time: smoke size times our arms only; peft's PT(20) and LoRA from --quick on")
        return arms
    if not peft_available():
        ctx.log("step_time: peft not installed (install the 'peers' extra); skipping its arms")
        return arms
    import peft

    arms["peft_pt20"] = peft.get_peft_model(
        _random_llama(hidden, layers),
        peft.PromptTuningConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=20, prompt_tuning_init="SAMPLE_VOCAB"
        ),
    )
    arms["peft_lora4"] = peft.get_peft_model(
        _random_llama(hidden, layers),
        peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "v_proj"]),
    )
    return arms


@SUITE.case("step_time", kind="speed")
def step_time(ctx: Context) -> None:
    """Seconds and peak live bytes per training step of every arm (ratio against PT(20)); hook cost."""
    from neurips25_core.testing import assert_close

    hidden = ctx.pick(smoke=32, quick=64, full=128)
    layers = ctx.pick(smoke=1, quick=4, full=4)
    batch, seq = ctx.pick(smoke=(4, 16), quick=(16, 97), full=(16, 97))
    with single_thread():
        arms = _speed_arms(ctx, hidden, layers)
        ids = torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(1))
        labels = ids.clone()
        labels[:, : seq - 1] = -100  # the label byte only, as in the quality tasks
        if "peft_pt20" in arms:
            with torch.no_grad():
                theirs = arms["peft_pt20"]
                theirs.prompt_encoder["default"].embedding.weight.copy_(arms["pt20"].capsules[0])
                assert_close(
                    arms["pt20"](input_ids=ids, labels=labels).logits,
                    theirs(input_ids=ids, labels=labels).logits,
                    rtol=1e-5,
                    name="our PT(20) vs peft PT(20) (same prompts)",
                )

        def stepper(model):
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=1e-3)
            model.train()

            def step():
                with torch.enable_grad():
                    model(input_ids=ids, labels=labels).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            return step

        steps = {name: stepper(m) for name, m in arms.items()}
        result = compare(steps, baseline="pt20", min_time=ctx.pick(smoke=0.01, quick=0.3, full=1.0))
        result.record(ctx, hidden=hidden, layers=layers, batch=batch, seq=seq)
        for name, model in arms.items():
            steps[name]()  # optimizer state exists: only the steady-state step is measured
            ctx.record(
                "peak_live_bytes",
                peak_live_bytes(steps[name]),
                "B",
                impl=name,
                trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
            )
        capt = arms["capt"].eval()
        bare = _random_llama(hidden, layers)
        with torch.no_grad():
            hook = compare(
                {"bare": lambda: bare(input_ids=ids), "capt": lambda: capt(input_ids=ids)},
                baseline="bare",
                rounds=ctx.pick(smoke=3, quick=None, full=None),
                min_time=ctx.pick(smoke=0.01, quick=0.2, full=0.5),
            )
        hook.record(ctx, metric="forward_time", hidden=hidden, layers=layers, batch=batch, seq=seq)


# ------------------------------------------------------------------------------------ quality
#: Learning-rate grids: three points per arm (the spec's for prompts; LoRA one decade lower).
LR_GRID = {"prompt": (3e-3, 1e-2, 3e-2), "lora": (3e-4, 1e-3, 3e-3)}
#: The rates of a plan that does not sweep: the spec's default and the issue's LoRA rate.
LR_DEFAULT = {"prompt": 1e-2, "lora": 1e-3}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The size of a quality run.

    Attributes:
        tasks: the tasks (T1 first: the sweep runs on T1).
        arms: the arms (peft's are dropped with a message when peft is absent).
        steps: training steps per run (batch 16).
        seeds: every arm runs each seed at its selected learning rate.
        sweep: sweep each arm's rate on the first task and seed, selected on the validation set.
        n_train, n_val, n_test: examples per task (train and validation from the train files).
        n_attention: test examples the slot-0 attention is averaged over.
    """

    tasks: tuple[str, ...]
    arms: tuple[str, ...]
    steps: int
    seeds: tuple[int, ...]
    sweep: bool = False
    n_train: int = 1000
    n_val: int = 200
    n_test: int = 1000
    n_attention: int = 64


PLANS = {
    "smoke": Plan(
        ("T1",),
        ("capt", "pt1", "peft_pt20", "peft_lora4"),
        3,
        (0,),
        n_train=32,
        n_val=0,
        n_test=16,
        n_attention=4,
    ),
    # The issue's --quick: T1, width 64 (2 layers), CaPT vs peft PT(20) and LoRA, 150 steps, one
    # seed. About 45 CPU s on an empty cache (pretraining the base ~12 s, each arm ~7 s).
    "quick": Plan(
        ("T1",), ("capt", "peft_pt20", "peft_lora4"), 150, (0,), n_val=0, n_test=400, n_attention=32
    ),
    # The reproduction (the spec's base, 500 steps instead of 1,500 for two cores): 24 sweep runs
    # + 64 runs of 500 steps, ~0.17 CPU s per step: about 2.3 CPU hours, single-threaded.
    "full": Plan(("T1", "T2", "T3"), ARMS, 500, (0, 1, 2), sweep=True),
}


def _family(arm: str) -> str:
    return "lora" if arm == "peft_lora4" else "prompt"


@functools.lru_cache(maxsize=2)
def _state(mode: str, plan: Plan) -> tuple:
    """The base and the task splits of a run (built once per process: workers rebuild their own)."""
    from . import quality
    from .tasks import make_task

    base = quality.pretrained_base(mode, progress=False)
    data = {}
    for task in plan.tasks:
        data[task] = {
            "train": make_task(task, plan.n_train, "train", seed=0),
            "val": make_task(task, plan.n_val, "train", seed=1) if plan.n_val else None,
            "test": make_task(task, plan.n_test, "test", seed=2),
        }
    return base, data


def _run(job: tuple) -> dict:
    """One training run: ``job = (mode, plan, arm, task, lr, seed)``; its accuracy and diagnostics."""
    from . import quality

    mode, plan, arm, task, lr, seed = job
    base, data = _state(mode, plan)
    ids, labels, spec = data[task]["train"]
    model = quality.build_arm(arm, base, seed=seed)
    info = quality.fit(model, ids, labels, spec, plan.steps, lr, seed=seed)
    r = {"arm": arm, "task": task, "lr": lr, "seed": seed, **info}
    for split in ("val", "test"):
        if data[task][split] is not None:
            x, y, _ = data[task][split]
            r[split] = quality.accuracy(model, x, y, spec)
    test_ids = data[task]["test"][0][: plan.n_attention]
    if quality.PROMPT_SLOTS[arm] is not None:
        r["slot0_attention"] = quality.slot_attention(model, test_ids, quality.PROMPT_SLOTS[arm])
    if arm == "peft_pt20":  # Finding II: the instance token in front, no retraining
        x, y, _ = data[task]["test"]
        r["finding_two"] = quality.finding_two(model, base, x, y, spec)
    return r


def _workers(mode: str) -> int:
    """Training processes: ``CAPT_WORKERS``, default 2 for ``--full`` (one per core of the
    reference machine) and 1 otherwise. Every run is seeded and single-threaded, so the results
    do not depend on the count."""
    default = min(2, os.cpu_count() or 1) if mode == "full" else 1
    return workers_from_env("CAPT_WORKERS", default)


def _quality(ctx: Context, plan: Plan) -> None:
    from . import quality

    base, _ = _state(ctx.mode, plan)
    meta = getattr(base, "neurips25_meta", {})
    ctx.log(
        f"quality: base width {base.config.hidden_size}, {base.config.num_hidden_layers} layers, "
        f"val bits/byte {meta.get('val_bpb')}"
    )
    arms = list(plan.arms)
    if not quality.peft_available():
        ctx.log("quality: peft not installed (install the 'peers' extra); skipping its arms")
        arms = [a for a in arms if not a.startswith("peft_")]
    workers = _workers(ctx.mode)
    if workers > 1:
        ctx.log(f"quality: {workers} worker processes, one thread each (CAPT_WORKERS)")

    def log(job: tuple, r: dict) -> None:
        ctx.log(
            f"{r['task']} {r['arm']} lr={r['lr']:g} seed={r['seed']}: test {r['test']:.3f}"
            + (f" val {r['val']:.3f}" if "val" in r else "")
            + f", loss {r['loss_start']:.2f} -> {r['loss_end']:.2f}"
            f" ({r['step_seconds'] * 1e3:.1f} ms/step, {r['cpu_seconds']:.0f} CPU s)"
        )

    def jobs(items: list[tuple], desc: str) -> list[dict]:
        return process_map(
            _run,
            [(ctx.mode, plan, *item) for item in items],
            workers=workers,
            desc=desc,
            on_result=log,
        )

    runs: list[dict] = []
    first_task, first_seed = plan.tasks[0], plan.seeds[0]
    best = {a: LR_DEFAULT[_family(a)] for a in arms}
    if plan.sweep:
        items = [(a, first_task, lr, first_seed) for a in arms for lr in LR_GRID[_family(a)]]
        runs += jobs(items, "lr sweep (T1, seed 0)")
        for arm in arms:
            tried = [r for r in runs if r["arm"] == arm]
            best[arm] = max(tried, key=lambda r: (r["val"], -r["loss_end"]))["lr"]
    done = {(r["arm"], r["task"], r["lr"], r["seed"]) for r in runs}
    items = [
        (a, t, best[a], s)
        for t in plan.tasks
        for s in plan.seeds
        for a in arms
        if (a, t, best[a], s) not in done
    ]
    runs += jobs(items, "quality runs")
    _summarise(ctx, plan, arms, runs, best)


def _summarise(ctx: Context, plan: Plan, arms: list[str], runs: list[dict], best: dict) -> None:
    from . import quality

    summary: dict = {}
    for task in plan.tasks:
        for arm in arms:
            rs = [r for r in runs if r["arm"] == arm and r["task"] == task and r["lr"] == best[arm]]
            mean, half = quality.mean_ci([r["test"] for r in rs])
            common = dict(
                impl=arm,
                task=task,
                seeds=len(rs),
                lr=best[arm],
                steps=plan.steps,
                trainable=rs[0]["trainable"],
            )
            ctx.record(
                "accuracy", mean, "fraction", lower_is_better=False, ci95=round(half, 4), **common
            )
            ctx.record("step_time", sum(r["step_seconds"] for r in rs) / len(rs), "s", **common)
            row = {"accuracy": [mean, half], "trainable": rs[0]["trainable"], "lr": best[arm]}
            if "finding_two" in rs[0]:
                m2, h2 = quality.mean_ci([r["finding_two"] for r in rs])
                ctx.record(
                    "accuracy_with_instance_token",
                    m2,
                    "fraction",
                    lower_is_better=False,
                    ci95=round(h2, 4),
                    baseline=arm,
                    baseline_value=mean,
                    **{**common, "impl": f"{arm}+instance_token"},
                )
                row["finding_two"] = [m2, h2]
            if "slot0_attention" in rs[0]:
                per_layer = [
                    sum(r["slot0_attention"][i] for r in rs) / len(rs)
                    for i in range(len(rs[0]["slot0_attention"]))
                ]
                for layer, value in enumerate(per_layer):
                    ctx.record(
                        "input_to_slot0_attention",
                        value,
                        "fraction",
                        lower_is_better=False,
                        layer=layer,
                        **common,
                    )
                row["slot0_attention"] = per_layer
            summary.setdefault(task, {})[arm] = row
    with open(ctx.path("quality_runs.json"), "w") as handle:
        json.dump(
            {"plan": dataclasses.asdict(plan), "best_lr": best, "summary": summary, "runs": runs},
            handle,
            indent=1,
        )
    plot_bars(
        arms,
        {task: [summary[task][a]["accuracy"][0] for a in arms] for task in plan.tasks},
        ctx.path("quality_accuracy.png"),
        ylabel="test accuracy",
        title=f"capt: accuracy per arm (mean of {len(plan.seeds)} seed(s), {plan.steps} steps)",
    )


@SUITE.case("quality", kind="quality")
def quality_case(ctx: Context) -> None:
    """Accuracy per arm and task (mean ± 95 % CI), parameters, step time, Finding II, slot-0 attention."""
    _quality(ctx, PLANS[ctx.mode])
