"""The nanoadam benchmark suite (``neurips25 bench nanoadam``).

Quality (real training on offline data):

* ``teacher_student`` — the paper's §2.3 toy (:func:`nanoadam.tasks.teacher_student`): masked
  GD on the 5 % smallest-|w| entries against the 5 % largest-|g| entries (both re-selected
  every 100 steps), test loss and ℓ2 weight shift. Smoke: 1 seed, 500 + 500 steps. Quick: 3
  seeds, 10k + 10k. Full: 10 seeds.
* ``forgetting`` — the reduced reproduction: a tiny Llama pretrained on stdlib source, a
  mean-pool head, task 1 (6 stdlib packages) then task 2 (6 others), head 1 reloaded after task
  2. Every arm gets the same LR sweep and is reported at its best LR (mean test accuracy of the
  two tasks). Arms: NanoAdam, full AdamW (the baseline the paper beats), LoRA via peft (the peer
  a user would pick), and in smoke and full mode the random / large-weight / large-grad /
  static-mask baselines. Metrics: accuracy, forgetting (task-1 points lost, and the pretraining corpus
  bits/byte increase through the untouched LM head), backbone ℓ2 shift, untouched fraction,
  optimizer state bytes, step time. Smoke: the core's width-32 toy model, 4 steps per task, one
  LR, all seven arms. Quick (under a minute of CPU with an empty cache): a smaller tiny Llama (hidden 64,
  2 layers, 4 heads, pretrained 200 steps of 16 × 64 bytes on stdlib source), 60 steps per task
  (batch 8, 64-byte snippets, 256 test snippets), LR ∈ {3e-4, 3e-3}, NanoAdam/AdamW/LoRA. Full: the core's 0.87M-parameter pretrained
  tiny Llama (hidden 128, 4 layers, 600 steps), 400 steps per task (batch 16, 256-byte
  snippets), LR ∈ {1e-4, 3e-4, 1e-3, 3e-3}, all seven arms.

Speed (CPU, one thread): ``step_time`` — one optimizer step of NanoAdam's torch path against
``torch.optim.AdamW(foreach=True)`` on eight n×n tensors at k ∈ {0.01, 0.04, 0.1}, interleaved
medians from ``bench.compare``; the mask refresh is timed separately and amortised over m = 100.
Outputs are checked equal first (density 1 equals AdamW). Smoke: n = 64; quick: n = 512;
full: n = 1024 (the issue's size; full also times each function longer).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import statistics
import sys

import torch

from neurips25_core.bench import Context, Suite, compare, plot_bars, plot_lines, single_thread

SUITE = Suite(
    name="nanoadam",
    paper="Pay Attention to Small Weights (NanoAdam)",
    url="https://arxiv.org/abs/2506.21374",
)


# ---------------------------------------------------------------------------- teacher–student
@SUITE.case("teacher_student", kind="quality")
def teacher_student_case(ctx: Context) -> None:
    """Small-|w| against large-|g| masked GD on the teacher–student toy (test loss, ℓ2 shift)."""
    from .tasks import teacher_student

    seeds = ctx.pick(smoke=1, quick=3, full=10)
    steps = ctx.pick(smoke=500, quick=10_000, full=10_000)
    runs = [teacher_student(seed, steps, steps) for seed in range(seeds)]
    for metric in ("test_loss", "l2_shift"):
        vals = {c: [r[c][metric] for r in runs] for c in ("small_weight", "large_grad")}
        mean = {c: statistics.fmean(v) for c, v in vals.items()}
        std = {c: statistics.pstdev(v) for c, v in vals.items()}
        ctx.record(
            metric,
            mean["small_weight"],
            "mse" if metric == "test_loss" else "l2",
            baseline="large_grad",
            baseline_value=mean["large_grad"],
            std=round(std["small_weight"], 4),
            baseline_std=round(std["large_grad"], 4),
            seeds=seeds,
            steps=steps,
            density=0.05,
            mask_interval=100,
        )
    pre = statistics.fmean(r["small_weight"]["pre_test_loss"] for r in runs)
    ctx.record("pretrained_test_loss", pre, "mse", seeds=seeds, steps=steps)
    with open(ctx.path("teacher_student.json"), "w") as f:
        json.dump(runs, f, indent=1)


# ------------------------------------------------------------------------------- forgetting
ARMS_QUICK = ("nanoadam", "adamw", "lora")
ARMS_FULL = ("nanoadam", "adamw", "random", "large_weight", "large_grad", "static", "lora")


@functools.lru_cache(maxsize=4)
def _snippets(packages: tuple[str, ...], length: int):
    from .tasks import PackageSnippets

    return PackageSnippets(packages, length)


#: --quick's backbone: the core's 0.87M model (600 pretraining steps) alone took minutes on the
#: shared two cores on an empty cache (the suite took 774 s), so quick pretrains this smaller one.
QUICK_LLAMA = dict(hidden_size=64, num_layers=2, num_heads=4)
QUICK_PRETRAIN = dict(steps=200, seq_len=64)


def _pretrained(mode: str):
    from neurips25_core.models import pretrained_tiny_llama_for, tiny_llama_config

    # full: the core's 0.87M model (hidden 128, 4 layers, 600 steps; cached after the first run);
    # quick: hidden 64, 2 layers, 200 steps of 64 bytes; smoke: the core's width-32 toy. Pretraining runs
    # under one thread in every mode.
    overrides = {}
    if mode == "quick":
        overrides = dict(config=tiny_llama_config(**QUICK_LLAMA), **QUICK_PRETRAIN)
    with single_thread():
        return pretrained_tiny_llama_for(mode, progress=sys.stderr.isatty(), **overrides)


def _optimizer(arm: str, clf: torch.nn.Module, lr: float, steps: int):
    from .groups import param_groups
    from .optimizer import NanoAdam

    if arm == "adamw":
        return torch.optim.AdamW(clf.parameters(), lr=lr, weight_decay=0.0)
    if arm == "lora":
        return torch.optim.AdamW(
            [p for p in clf.parameters() if p.requires_grad], lr=lr, weight_decay=0.0
        )
    criterion = {"nanoadam": "small_weight", "static": "small_weight"}.get(arm, arm)
    groups = param_groups(clf)
    if arm == "static":
        kw = dict(density=0.1, mask_interval=None)
    else:
        # the GLUE recipe: 10 % -> 4 %, m ≈ 5 % and d ≈ 12 % of the steps
        kw = dict(
            density=0.1,
            final_density=0.04,
            total_steps=steps,
            mask_interval=max(1, round(0.05 * steps)),
            density_interval=max(1, round(0.12 * steps)),
        )
    return NanoAdam(groups, lr=lr, criterion=criterion, chunk_size=4096, **kw)


def _add_lora(backbone: torch.nn.Module, rank: int):
    from peft import LoraConfig, inject_adapter_in_model

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, lora_dropout=0.0)
    backbone = inject_adapter_in_model(cfg, backbone)
    for name, p in backbone.named_parameters():
        p.requires_grad_("lora_" in name)
    return backbone


@torch.no_grad()
def _effective_backbone(backbone: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Backbone weights as the forward uses them (LoRA deltas merged), keyed like the base."""
    out = {}
    for name, p in backbone.named_parameters():
        if "lora_" in name:
            continue
        out[name.replace(".base_layer", "")] = p.detach().clone()
    for name, mod in backbone.named_modules():
        if hasattr(mod, "get_delta_weight") and hasattr(mod, "lora_A"):
            out[f"{name}.weight"] = out[f"{name}.weight"] + mod.get_delta_weight("default")
    return out


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    return sum(
        v.numel() * v.element_size()
        for st in opt.state.values()
        for v in st.values()
        if torch.is_tensor(v)
    )


@torch.no_grad()
def _accuracy(clf, data, n: int, batch: int = 64) -> float:
    clf.eval()
    x, y = data.batch("test", n, seed=12345)
    hits = sum(
        int((clf(x[i : i + batch]).argmax(-1) == y[i : i + batch]).sum())
        for i in range(0, n, batch)
    )
    return hits / n


def _run_arm(arm, lr, lm0, size, tasks, corpus, bpb0) -> dict:
    """Fine-tune a copy of ``lm0`` on task 1 then task 2 with one arm at one LR."""
    from neurips25_core.models import evaluate_bpb, train

    from .tasks import PooledClassifier

    lm = copy.deepcopy(lm0)
    hidden = lm.config.hidden_size
    backbone = lm.model
    if arm == "lora":
        backbone = _add_lora(backbone, rank=size["lora_rank"])
    before = _effective_backbone(backbone)
    heads, accs, bytes_, seconds, diverged = [], [], 0, 0.0, False
    for t, data in enumerate(tasks):
        torch.manual_seed(100 + t)
        clf = PooledClassifier(backbone, hidden, len(data.packages))
        steps = size["steps"]
        opt = _optimizer(arm, clf, lr, steps)

        def batches(step, data=data, t=t):
            return data.batch("train", size["batch"], seed=1000 * t + step)

        def loss_fn(model, x, y):
            return torch.nn.functional.cross_entropy(model(x), y)

        try:
            res = train(
                clf, batches, steps, optimizer=opt, loss_fn=loss_fn, progress=False, grad_clip=1.0
            )
            seconds += res.seconds
        except FloatingPointError:
            diverged = True
        bytes_ = max(bytes_, _state_bytes(opt))
        heads.append(clf.head)
        accs.append(_accuracy(clf, data, size["eval"]))
    clf1 = PooledClassifier(backbone, hidden, len(tasks[0].packages))
    clf1.head = heads[0]
    acc1_after = _accuracy(clf1, tasks[0], size["eval"])
    after = _effective_backbone(backbone)
    diff2 = sum(float((after[k] - before[k]).double().square().sum()) for k in before)
    norm2 = sum(float(before[k].double().square().sum()) for k in before)
    same = sum(int((after[k] == before[k]).sum()) for k in before)
    numel = sum(before[k].numel() for k in before)
    bpb = evaluate_bpb(lm, corpus, seq_len=size["bpb_seq"], num_batches=size["bpb_batches"])
    return {
        "arm": arm,
        "lr": lr,
        "acc_task1": accs[0],
        "acc_task2": accs[1],
        "acc_task1_after_task2": acc1_after,
        "forgetting_points": 100 * (accs[0] - acc1_after),
        "bpb_increase": bpb - bpb0,
        "l2_shift": math.sqrt(diff2),
        "relative_l2_shift": math.sqrt(diff2 / norm2),
        "untouched_fraction": same / numel,
        "state_bytes": bytes_,
        "step_seconds": seconds / (2 * size["steps"]),
        "diverged": diverged,
        "score": (accs[0] + accs[1]) / 2,
    }


def _peft_available() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


@SUITE.case("forgetting", kind="quality")
def forgetting_case(ctx: Context) -> None:
    """Sequential fine-tuning on two snippet tasks: accuracy, forgetting, ℓ2 shift, state bytes."""
    # smoke runs every arm at toy size, so the full run's arms are exercised end to end in CI
    forgetting(ctx, ctx.pick(smoke=ARMS_FULL, quick=ARMS_QUICK, full=ARMS_FULL))


def forgetting(ctx: Context, arms) -> None:
    """The forgetting case at ``ctx.mode``'s sizes with the given arms (must include "adamw")."""
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb

    from .tasks import TASK1, TASK2

    size = ctx.pick(
        smoke=dict(
            steps=4,
            batch=8,
            length=64,
            eval=64,
            lrs=(1e-3,),
            bpb_seq=64,
            bpb_batches=2,
            lora_rank=4,
        ),
        quick=dict(
            steps=60,
            batch=8,
            length=64,
            eval=256,
            lrs=(3e-4, 3e-3),
            bpb_seq=128,
            bpb_batches=8,
            lora_rank=4,
        ),
        full=dict(
            steps=400,
            batch=16,
            length=256,
            eval=1536,
            lrs=(1e-4, 3e-4, 1e-3, 3e-3),
            bpb_seq=128,
            bpb_batches=20,
            lora_rank=8,
        ),
    )
    arms = list(arms)
    unknown = set(arms) - set(ARMS_FULL)
    if unknown or "adamw" not in arms:
        raise ValueError(f"arms: expected a subset of {ARMS_FULL} with 'adamw', got {arms}")
    if not _peft_available():
        ctx.log("forgetting: peft is not installed (pip install 'nanoadam[peers]'): LoRA skipped")
        arms.remove("lora")
    corpus = stdlib_corpus()
    tasks = [_snippets(TASK1, size["length"]), _snippets(TASK2, size["length"])]
    with single_thread():
        lm0 = _pretrained(ctx.mode)
        bpb0 = evaluate_bpb(lm0, corpus, seq_len=size["bpb_seq"], num_batches=size["bpb_batches"])
        runs = [_run_arm(a, lr, lm0, size, tasks, corpus, bpb0) for a in arms for lr in size["lrs"]]
    best = {a: max((r for r in runs if r["arm"] == a), key=lambda r: r["score"]) for a in arms}
    base = best["adamw"]
    higher = ("acc_task1", "acc_task2", "acc_task1_after_task2", "untouched_fraction")
    units = dict(
        acc_task1="acc",
        acc_task2="acc",
        acc_task1_after_task2="acc",
        forgetting_points="points",
        bpb_increase="bpb",
        l2_shift="l2",
        relative_l2_shift="ratio",
        untouched_fraction="fraction",
        state_bytes="B",
        step_seconds="s",
    )
    for a in arms:
        r = best[a]
        for metric, unit in units.items():
            ctx.record(
                metric,
                r[metric],
                unit,
                baseline=None if a == "adamw" else "adamw",
                baseline_value=None if a == "adamw" else base[metric],
                lower_is_better=metric not in higher,
                arm=a,
                best_lr=r["lr"],
                steps_per_task=size["steps"],
                lrs="/".join(f"{x:g}" for x in size["lrs"]),
            )
    ctx.record("pretrained_bpb", bpb0, "bpb")
    with open(ctx.path("forgetting_runs.json"), "w") as f:
        json.dump(runs, f, indent=1)
    lrs = list(size["lrs"])
    score = {
        a: [next(r["score"] for r in runs if r["arm"] == a and r["lr"] == lr) for lr in lrs]
        for a in arms
    }
    plot_lines(
        lrs,
        score,
        ctx.path("forgetting_lr_sweep.png"),
        xlabel="learning rate",
        ylabel="mean test accuracy (task 1, task 2)",
        title="LR sweep per arm",
        logx=True,
    )
    plot_bars(
        arms,
        {
            "forgetting (points)": [best[a]["forgetting_points"] for a in arms],
            "bpb increase x100": [100 * best[a]["bpb_increase"] for a in arms],
            "relative l2 shift x100": [100 * best[a]["relative_l2_shift"] for a in arms],
        },
        ctx.path("forgetting_best.png"),
        ylabel="at each arm's best LR",
        title="forgetting and weight shift",
    )


# --------------------------------------------------------------------------------- step time
@SUITE.case("step_time", kind="speed")
def step_time_case(ctx: Context) -> None:
    """NanoAdam's torch step vs AdamW(foreach=True) on eight n×n tensors; refresh amortised."""
    from .optimizer import NanoAdam

    n = ctx.pick(smoke=64, quick=512, full=1024)
    count = 8
    min_time = ctx.pick(smoke=0.02, quick=0.3, full=1.0)
    max_time = ctx.pick(smoke=0.5, quick=3.0, full=20.0)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, n, generator=gen) for _ in range(count)]
    grads = [torch.randn(n, n, generator=gen) * 1e-3 for _ in range(count)]

    def make(kind, density=None):
        ps = [torch.nn.Parameter(w.clone()) for w in weights]
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        if kind == "adamw":
            opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.0, foreach=True)
        else:
            opt = NanoAdam(ps, lr=1e-3, density=density, mask_interval=10**9)
        return ps, opt

    with single_thread():
        # outputs equal first: at density 1 the compact step is AdamW
        (pa, oa), (pn, on) = make("adamw"), make("nanoadam", 1.0)
        for _ in range(3):
            oa.step(), on.step()
        err = max(float((a - b).detach().norm() / b.detach().norm()) for a, b in zip(pn, pa))
        if err > 1e-5:
            raise AssertionError(f"step_time: NanoAdam at density 1 differs from AdamW ({err:.2e})")
        ctx.record("density1_rel_error_vs_adamw", err, "rel", n=n)
        _, adamw = make("adamw")
        adamw.step()
        adamw_bytes = _state_bytes(adamw)
        ratios = []
        densities = (0.01, 0.04, 0.1)
        for k in densities:
            _, nano = make("nanoadam", k)
            nano.step()  # builds I and the state
            res = compare(
                {
                    "AdamW(foreach)": adamw.step,
                    f"NanoAdam k={k}": nano.step,
                    f"refresh k={k}": nano.refresh_masks,
                },
                baseline="AdamW(foreach)",
                min_time=min_time,
                max_time=max_time,
            )
            res.record(ctx, metric="step_time", n=n, tensors=count, density=k)
            step = res.timings[f"NanoAdam k={k}"].median
            refresh = res.timings[f"refresh k={k}"].median
            amortised = step + refresh / 100
            base = res.timings["AdamW(foreach)"].median
            ctx.record(
                "amortised_step_time_m100",
                amortised,
                "s",
                baseline="AdamW(foreach)",
                baseline_value=base,
                n=n,
                density=k,
            )
            ctx.record(
                "state_bytes",
                nano.state_bytes(),
                "B",
                baseline="AdamW(foreach)",
                baseline_value=adamw_bytes,
                n=n,
                density=k,
                bytes_per_param=round(nano.state_bytes() / (count * n * n), 3),
            )
            ratios.append(amortised / base)
    plot_lines(
        list(densities),
        {"NanoAdam / AdamW step time (m=100)": ratios},
        ctx.path("step_time_ratio.png"),
        xlabel="density k",
        ylabel="time ratio",
        title=f"{count} x {n}^2 tensors, one thread",
        logx=True,
    )
