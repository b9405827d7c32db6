"""The ptmoe benchmark suite (``neurips25 bench ptmoe``).

* ``step_time`` (speed, CPU, one thread): one AdamW training step (forward, backward, update of
  the prompt parameters only) of a frozen random-weight Llama for PT-MoE, and on the same prepend
  code PT, DPT and SMoP, plus peft's prompt tuning and LoRA (q_proj, v_proj) from the ``peers``
  extra (skipped with a message when absent). Our PT is checked equal to peft's PT with the same
  prompt before anything is timed. Also the time of composing the PT-MoE prompt against the
  forward it feeds. Records seconds per step (against PT), tokens/s and trainable parameters.

* ``qa`` and ``math`` (quality, the reduced reproduction, :mod:`ptmoe.quality`): a byte-level
  Llama pretrained on the stdlib corpus mixed with ``Q: … A: …`` and arithmetic text (cached),
  then every arm trained on the in-domain generators with :func:`ptmoe.train.fit` and scored with
  :func:`ptmoe.train.evaluate` on held-out in-domain and out-of-domain sets: SQuAD F1/EM for
  ``qa``, final-integer accuracy for ``math``. Full mode sweeps the learning rate of every main
  arm on seed 0 (the same grid size for each), selects on a validation set, then reruns the
  best setting on more seeds (mean ± 95 % CI); PT-MoE's domain × expert histogram is plotted.
  The runs fan out over ``$PTMOE_WORKERS`` processes (default 1; one torch thread each, through
  :func:`neurips25_core.parallel.process_map`); every run is rebuilt from its seeds, so the
  results do not depend on the number of workers.
  ``--quick`` runs ``qa`` only (PT-MoE vs peft PT vs peft LoRA, one seed, no sweep).
"""

from __future__ import annotations

import dataclasses
import json

import torch

from neurips25_core.bench import Context, Suite, compare, plot_bars, single_thread

SUITE = Suite(
    name="ptmoe",
    paper="PT-MoE: An Efficient Finetuning Framework for Integrating Mixture-of-Experts into Prompt Tuning",
    url="https://arxiv.org/abs/2505.09519",
)


def _peft():
    try:
        import peft
    except ImportError:
        return None
    return peft


def _random_llama(hidden: int, layers: int, vocab: int = 260, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def _arms(ctx: Context, hidden: int, layers: int, T: int):
    """name -> (model, parameter count). Every arm wraps its own copy of the same base."""
    from . import budget
    from .baselines import DecomposedPromptTuning, PromptTuning, SMoP, apply_prompt
    from .config import PTMoEConfig
    from .model import get_peft_model

    target = T * hidden
    tol = 0.15  # toy sizes cannot always land within 5 %; every arm's count is recorded
    r_moe = budget.solve("ptmoe", target, hidden, T, num_experts=2, tolerance=tol)["value"]
    r_dpt = budget.solve("dpt", target, hidden, T, tolerance=tol)["value"]
    g = torch.Generator().manual_seed(0)
    arms = {}
    base = _random_llama(hidden, layers)
    arms["pt"] = apply_prompt(base, PromptTuning(base.get_input_embeddings(), T, generator=g))
    base = _random_llama(hidden, layers)
    arms["ptmoe"] = get_peft_model(
        base, PTMoEConfig(prompt_length=T, num_experts=2, rank=r_moe), generator=g
    )
    base = _random_llama(hidden, layers)
    arms["dpt"] = apply_prompt(
        base, DecomposedPromptTuning(base.get_input_embeddings(), T, r_dpt, generator=g)
    )
    base = _random_llama(hidden, layers)
    arms["smop"] = apply_prompt(base, SMoP(base.get_input_embeddings(), 2, T // 2, generator=g))
    peft = _peft()
    if peft is None:
        ctx.log("step_time: peft not installed (install the 'peers' extra); skipping peft PT/LoRA")
    else:
        arms["peft_pt"] = peft.get_peft_model(
            _random_llama(hidden, layers),
            peft.PromptTuningConfig(
                task_type="CAUSAL_LM", num_virtual_tokens=T, prompt_tuning_init="SAMPLE_VOCAB"
            ),
        )
        arms["peft_lora"] = peft.get_peft_model(
            _random_llama(hidden, layers),
            peft.LoraConfig(
                task_type="CAUSAL_LM", r=ctx.pick(1, 3, 2), target_modules=["q_proj", "v_proj"]
            ),
        )
    return arms


def _check_pt_equals_peft(arms, ids, labels) -> None:
    from neurips25_core.testing import assert_close

    if "peft_pt" not in arms:
        return
    ours, theirs = arms["pt"], arms["peft_pt"]
    with torch.no_grad():
        theirs.prompt_encoder["default"].embedding.weight.copy_(ours.prompt_encoder.prompt)
        assert_close(
            ours(input_ids=ids, labels=labels).logits,
            theirs(input_ids=ids, labels=labels).logits,
            rtol=1e-5,
            name="our PT vs peft PT (same prompt)",
        )


@SUITE.case("step_time", kind="speed")
def step_time(ctx: Context) -> None:
    """Seconds per training step of every arm (ratio against PT), tokens/s, compose vs forward."""
    hidden = ctx.pick(smoke=32, quick=64, full=128)
    layers = ctx.pick(smoke=1, quick=2, full=4)
    T = ctx.pick(smoke=10, quick=40, full=40)
    batch, seq = ctx.pick(smoke=(4, 16), quick=(16, 64), full=(16, 128))
    with single_thread():
        arms = _arms(ctx, hidden, layers, T)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(3, 260, (batch, seq), generator=g)
        labels = ids.clone()
        labels[:, : seq // 2] = -100
        _check_pt_equals_peft(arms, ids, labels)

        def stepper(model):
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=1e-3)
            model.train()

            def step():
                loss = model(input_ids=ids, labels=labels).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            return step

        counts = {
            name: sum(p.numel() for p in m.parameters() if p.requires_grad)
            for name, m in arms.items()
        }
        result = compare(
            {name: stepper(m) for name, m in arms.items()},
            baseline="pt",
            min_time=ctx.pick(smoke=0.01, quick=0.15, full=1.0),
        )
        result.record(ctx, hidden=hidden, layers=layers, T=T, batch=batch, seq=seq)
        for name in arms:
            ctx.record(
                "tokens_per_s",
                batch * seq / result[name].median,
                "tok/s",
                lower_is_better=False,
                impl=name,
                trainable=counts[name],
            )
        moe = arms["ptmoe"].eval()
        embeds = moe.base_model.get_input_embeddings()(ids)
        with torch.no_grad():
            parts = compare(
                {
                    "forward": lambda: moe(input_ids=ids),
                    "compose": lambda: moe.prompt_encoder(inputs_embeds=embeds),
                },
                baseline="forward",
                min_time=ctx.pick(smoke=0.01, quick=0.1, full=0.5),
            )
        parts.record(ctx, metric="compose_vs_forward", hidden=hidden, T=T, batch=batch, seq=seq)


# ------------------------------------------------------------------------------------ quality
#: Learning-rate grids (the same number of points for every arm; LoRA on its own scale).
LR_GRID = {"prompt": (1e-2, 3e-2, 1e-1), "lora": (1e-3, 3e-3, 1e-2)}
#: The untuned learning rates where a plan does not sweep (the spec's 3e-2; LoRA's usual 3e-3).
LR_DEFAULT = {"prompt": 3e-2, "lora": 3e-3}
MAIN_ARMS = ("ptmoe", "pt", "dpt", "smop", "peft_pt", "peft_lora")
ABLATIONS = ("ptmoe_n1", "ptmoe_n4", "ptmoe_soft", "ptmoe_uniform")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The size of a quality run.

    Attributes:
        base: which pretrained base (:func:`ptmoe.quality.pretrained_base` mode: hidden 32/64/128).
        arms: the arms trained (peft arms are dropped with a message when peft is absent).
        steps: prompt-training steps per run (batch 16).
        seeds: the seeds every arm runs at its selected learning rate.
        sweep: arms whose learning rate is swept over :data:`LR_GRID` on the first seed and
            selected on the validation set; the other arms take PT-MoE's selected rate (ablations)
            or :data:`LR_DEFAULT`.
        n_train, n_val, n_eval: training pool, validation set and each held-out set's size.
        max_new_tokens: greedy decoding length (QA answers are short, math solutions ~35 bytes).
        lr_grid: ``(("prompt", rates), ("lora", rates))``, the same number of points per arm.
    """

    base: str
    arms: tuple[str, ...]
    steps: int
    seeds: tuple[int, ...]
    sweep: tuple[str, ...] = ()
    n_train: int = 2000
    n_val: int = 0
    n_eval: int = 96
    max_new_tokens: int = 12
    lr_grid: tuple[tuple[str, tuple[float, ...]], ...] = tuple(LR_GRID.items())


PLANS = {
    "smoke": {
        "qa": Plan(
            "smoke", ("ptmoe", "pt", "peft_lora"), 3, (0,), n_train=32, n_eval=6, max_new_tokens=4
        ),
        "math": Plan(
            "smoke", ("ptmoe", "pt", "peft_lora"), 3, (0,), n_train=32, n_eval=6, max_new_tokens=4
        ),
    },
    # The issue's --quick: QA only, PT-MoE vs peft PT vs peft LoRA, 100 steps, one seed, no sweep.
    "quick": {"qa": Plan("quick", ("ptmoe", "peft_pt", "peft_lora"), 100, (0,), n_eval=48)},
    # The full reproduction (hidden 128, 4 layers, 600 steps, every main arm swept, 3 seeds):
    # 42 runs per task (18 sweep + 24 seed runs). Measured per-step/per-pass costs (README, "Cost of
    # --full") put it at ~5.5 CPU hours; PTMOE_WORKERS=2 runs it in ~3 wall hours on 2 idle cores.
    "full": {
        task: Plan(
            "full",
            MAIN_ARMS + ABLATIONS,
            600,
            (0, 1, 2),
            sweep=MAIN_ARMS,
            n_train=4000,
            n_val=48,
            max_new_tokens=12 if task == "qa" else 40,
        )
        for task in ("qa", "math")
    },
}

#: The reduced reproduction committed in results/reduced (``python -m ptmoe.bench reduced``):
#: the quick base (hidden 64), 100 steps, 2 seeds, a two-point LR grid per arm, small held-out
#: sets; sized to the ~20 CPU minutes a loaded two-core machine could give it.
_REDUCED_GRID = (("prompt", (3e-2, 1e-1)), ("lora", (3e-3, 1e-2)))
REDUCED = {
    "qa": Plan(
        "quick",
        MAIN_ARMS + ABLATIONS,
        100,
        (0, 1),
        sweep=MAIN_ARMS,
        n_val=24,
        n_eval=36,
        lr_grid=_REDUCED_GRID,
    ),
    "math": Plan("quick", ("ptmoe", "pt", "peft_lora"), 100, (0, 1), n_eval=36, max_new_tokens=40),
}


def _lr_family(arm: str) -> str:
    return "lora" if arm == "peft_lora" else "prompt"


def _score_key(task: str) -> str:
    return "f1" if task == "qa" else "accuracy"


def _workers() -> int:
    """Processes for the quality runs: ``$PTMOE_WORKERS`` (default 1), one torch thread each."""
    from neurips25_core.parallel import workers_from_env

    return workers_from_env("PTMOE_WORKERS", 1)


def _task_sets(task: str, plan: Plan):
    """The training pool and the evaluation sets of ``plan`` (seeded: the same in every process)."""
    from .tasks import (
        IN_DOMAIN,
        MATH_IN_DOMAIN,
        MATH_OUT_OF_DOMAIN,
        OUT_OF_DOMAIN,
        math_examples,
        qa_examples,
    )

    if task == "qa":
        make, ind, ood = qa_examples, list(IN_DOMAIN), list(OUT_OF_DOMAIN)
    else:
        make, ind, ood = math_examples, list(MATH_IN_DOMAIN), list(MATH_OUT_OF_DOMAIN)
    train_set = make(ind, plan.n_train, seed=1)
    eval_sets = {
        "val": make(ind, plan.n_val, seed=2),
        "in_domain": make(ind, plan.n_eval, seed=3),
        "out_of_domain": make(ood, plan.n_eval, seed=4),
    }
    return train_set, {k: v for k, v in eval_sets.items() if v}


#: Per process: the base's (config, state dict) by (mode, $NEURIPS25_CACHE), loaded once per worker.
_BASES: dict[tuple[str, str], tuple] = {}


def _base_state(mode: str):
    import os

    from . import quality

    key = (mode, os.environ.get("NEURIPS25_CACHE", ""))  # the checkpoint cache it came from
    if key not in _BASES:
        base = quality.pretrained_base(mode, progress=False)
        _BASES[key] = (base.config, base.state_dict())
    return _BASES[key]


def _run_job(job: tuple) -> dict:
    """One quality run ``(task, plan, arm, lr, seed)``: a module-level function for ``process_map``.

    Everything it uses is rebuilt from seeds (the cached base, the task sets), so a run gives the
    same result in any process and in any order.
    """
    from neurips25_core.models import tiny_llama

    from . import quality

    task, plan, arm, lr, seed = job
    config, state = _base_state(plan.base)

    def fresh():
        model = tiny_llama(config)
        model.load_state_dict(state)
        return model.eval()

    train_set, eval_sets = _task_sets(task, plan)
    return quality.run_arm(
        arm,
        fresh,
        task,
        train_set,
        eval_sets,
        plan.steps,
        lr,
        seed=seed,
        max_new_tokens=plan.max_new_tokens,
    )


def run_jobs(ctx: Context, task: str, plan: Plan, items, workers: int = 1) -> list[dict]:
    """``[_run_job((task, plan, arm, lr, seed)) for arm, lr, seed in items]`` in ``workers``
    processes (:func:`neurips25_core.parallel.process_map`), logging each run as it finishes.
    The base must be in the checkpoint cache already (every worker loads it)."""
    from neurips25_core.parallel import process_map

    key = _score_key(task)

    def log(job, r):
        ctx.log(
            f"{task} {r['arm']} lr={r['lr']:g} seed={r['seed']}: "
            + ", ".join(f"{k} {v['all'][key]:.3f}" for k, v in r["scores"].items())
            + f", loss {r['loss_start']:.2f} -> {r['loss_end']:.2f} ({r['cpu_seconds']:.0f} CPU s)"
        )

    jobs = [(task, plan, arm, lr, seed) for arm, lr, seed in items]
    return process_map(_run_job, jobs, workers=workers, desc=f"{task} runs", on_result=log)


def _quality(ctx: Context, task: str, plan: Plan) -> None:
    from . import quality

    base = quality.pretrained_base(plan.base)  # built (and cached) here, before any worker starts
    meta = getattr(base, "neurips25_meta", {})
    ctx.log(
        f"{task}: base hidden {base.config.hidden_size}, {base.config.num_hidden_layers} layers, "
        f"val bits/byte {meta.get('val_bpb')}"
    )
    train_set, eval_sets = _task_sets(task, plan)
    with single_thread():
        base_scores = quality.zero_shot(
            base, task, {k: v for k, v in eval_sets.items() if k != "val"}, plan.max_new_tokens
        )
    key = _score_key(task)
    for set_name, scores in base_scores.items():
        ctx.record(
            f"zero_shot_{key}",
            scores["all"][key],
            "fraction",
            lower_is_better=False,
            impl="base",
            set=set_name,
        )
    ctx.log(
        f"{task}: base zero-shot {key} "
        + ", ".join(f"{k} {v['all'][key]:.3f}" for k, v in base_scores.items())
    )
    del base, train_set
    arms = list(plan.arms)
    if _peft() is None:
        ctx.log(f"{task}: peft not installed (install the 'peers' extra); skipping its arms")
        arms = [a for a in arms if not a.startswith("peft_")]
    swept = [a for a in arms if a in plan.sweep]
    first = plan.seeds[0]
    workers = _workers()
    grid = dict(plan.lr_grid)
    runs = run_jobs(
        ctx, task, plan, [(a, lr, first) for a in swept for lr in grid[_lr_family(a)]], workers
    )
    best_lr = {}
    for arm in swept:
        tried = [r for r in runs if r["arm"] == arm]
        best = max(tried, key=lambda r: (r["scores"]["val"]["all"][key], -r["loss_end"]))
        best_lr[arm] = best["lr"]
    for arm in arms:
        if arm not in best_lr:
            best_lr[arm] = (
                best_lr["ptmoe"]
                if arm.startswith("ptmoe") and "ptmoe" in best_lr
                else LR_DEFAULT[_lr_family(arm)]
            )
    done = {(r["arm"], r["lr"], r["seed"]) for r in runs}
    rest = [
        (arm, best_lr[arm], seed)
        for seed in plan.seeds
        for arm in arms
        if (arm, best_lr[arm], seed) not in done
    ]
    runs += run_jobs(ctx, task, plan, rest, workers)

    with open(ctx.path(f"{task}_runs.json"), "w") as handle:
        json.dump(
            {
                "plan": dataclasses.asdict(plan),
                "best_lr": best_lr,
                "base_zero_shot": base_scores,
                "runs": runs,
            },
            handle,
        )
    _summarise(ctx, task, plan, arms, runs, best_lr, base_scores)


def _typed_guess(ctx: Context, task: str, plan: Plan) -> dict:
    """QA only: record the chance of guessing a context value of the answer's type
    (:func:`ptmoe.tasks.typed_guess`) per held-out set; scores above it need retrieval."""
    from . import tasks

    if task != "qa":
        return {}
    guess = {}
    for set_name, examples in _task_sets(task, plan)[1].items():
        if set_name == "val":
            continue
        guess[set_name] = tasks.typed_guess_scores(examples)
        ctx.record(
            "typed_guess_f1",
            guess[set_name]["all"]["f1"],
            "fraction",
            lower_is_better=False,
            impl="typed_guess",
            set=set_name,
        )
    ctx.log(
        "qa: chance of a random context value of the answer's type, F1 "
        + ", ".join(f"{k} {v['all']['f1']:.3f}" for k, v in guess.items())
    )
    return guess


def _summarise(
    ctx: Context, task: str, plan: Plan, arms, runs, best_lr, base_zero_shot=None
) -> None:
    """Records (mean ± 95 % CI per arm, set and domain), the summary JSON and the plots."""
    from . import quality

    key = _score_key(task)
    first = plan.seeds[0]
    chosen = {a: [r for r in runs if r["arm"] == a and r["lr"] == best_lr[a]] for a in arms}
    summary = {}
    for arm, rs in chosen.items():
        row = {"lr": best_lr[arm], "seeds": [r["seed"] for r in rs], **rs[0]["info"]}
        for set_name in ("in_domain", "out_of_domain"):
            for domain, metrics in rs[0]["scores"][set_name].items():
                for metric in metrics:
                    values = [r["scores"][set_name][domain][metric] for r in rs]
                    mean, half = quality.mean_ci(values)
                    row[f"{set_name}/{domain}/{metric}"] = [mean, half]
                    ctx.record(
                        f"{set_name}_{metric}",
                        mean,
                        "fraction",
                        lower_is_better=False,
                        impl=arm,
                        domain=domain,
                        ci95=round(half, 4),
                        seeds=len(rs),
                        lr=best_lr[arm],
                        trainable=rs[0]["info"]["trainable"],
                        size=rs[0]["info"]["size"],
                        steps=plan.steps,
                    )
        row["loss_end"] = list(quality.mean_ci([r["loss_end"] for r in rs]))
        summary[arm] = row
    with open(ctx.path(f"{task}_runs.json"), "w") as handle:
        json.dump(
            {
                "plan": dataclasses.asdict(plan),
                "best_lr": best_lr,
                "base_zero_shot": base_zero_shot,
                "typed_guess": _typed_guess(ctx, task, plan),
                "summary": summary,
                "runs": runs,
            },
            handle,
            indent=1,
        )

    # PT-MoE's routing: domain x expert top-1 counts on both held-out sets (first seed).
    moe = [r for r in chosen.get("ptmoe", []) if r["seed"] == first]
    if moe:
        hist = {}
        for set_name in ("in_domain", "out_of_domain"):
            hist.update(moe[0]["routing"][set_name]["histogram"])
        experts = len(next(iter(hist.values())))
        for domain, counts in hist.items():
            ctx.record(
                "expert0_share",
                counts[0] / max(sum(counts), 1),
                "fraction",
                impl="ptmoe",
                domain=domain,
                counts=counts,
            )
        plot_bars(
            list(hist),
            {f"expert {e}": [c[e] / max(sum(c), 1) for c in hist.values()] for e in range(experts)},
            ctx.path(f"{task}_expert_histogram.png"),
            ylabel="share of top-1 routing",
            title=f"PT-MoE routing per domain ({task}, held-out sets, seed {first})",
        )
    labels = [a for a in arms if a in summary]
    plot_bars(
        labels,
        {
            f"{s} {key}": [summary[a][f"{s}/all/{key}"][0] for a in labels]
            for s in ("in_domain", "out_of_domain")
        },
        ctx.path(f"{task}_arms.png"),
        ylabel=key,
        title=f"{task}: held-out {key} per arm (mean of {len(plan.seeds)} seed(s))",
    )


@SUITE.case("qa", kind="quality")
def qa(ctx: Context) -> None:
    """QA (synthetic MRQA analogue): SQuAD F1/EM per arm, in and out of domain; expert histogram."""
    _quality(ctx, "qa", PLANS[ctx.mode]["qa"])


@SUITE.case("math", kind="quality", modes=("smoke", "full"))
def math_case(ctx: Context) -> None:
    """Math (GSM8K analogue): final-integer accuracy per arm, in and out of domain."""
    _quality(ctx, "math", PLANS[ctx.mode]["math"])


def main(argv: list[str] | None = None) -> int:
    """The committed reduced run, in parallel parts, then merged::

        python -m ptmoe.bench reduced --task qa --arms ptmoe,ptmoe_n1 --out DIR/part1
        python -m ptmoe.bench merge --task qa --out DIR DIR/part1 DIR/part2 ...

    A part runs the reduced plan for its arms only (PT-MoE's ablations need ``ptmoe`` in the same
    part: they take its selected learning rate); ``merge`` joins the parts' runs and writes the
    records, the summary and the plots as one case.
    """
    import argparse
    from pathlib import Path

    from neurips25_core.bench import write_json, write_markdown

    parser = argparse.ArgumentParser(description="ptmoe's reduced quality reproduction")
    parser.add_argument("what", choices=["reduced", "merge"])
    parser.add_argument("parts", nargs="*", help="merge: the parts' output folders")
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", choices=sorted(REDUCED), required=True)
    parser.add_argument("--arms", default=None, help="reduced: comma-separated arms (default all)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    task, plan = args.task, REDUCED[args.task]
    ctx = Context(suite="ptmoe", case=task, mode="full", out_dir=out)
    if args.what == "reduced":
        if args.arms:
            arms = tuple(args.arms.split(","))
            unknown = sorted(set(arms) - set(plan.arms))
            if unknown:
                parser.error(f"--arms: {unknown} are not arms of the {task} plan {plan.arms}")
            plan = dataclasses.replace(
                plan, arms=arms, sweep=tuple(a for a in plan.sweep if a in arms)
            )
        _quality(ctx, task, plan)
    else:
        runs, best_lr, base_scores = [], {}, None
        for part in args.parts:
            data = json.loads((Path(part) / f"{task}_runs.json").read_text())
            runs += data["runs"]
            best_lr.update(data["best_lr"])
            base_scores = base_scores or data.get("base_zero_shot")
        arms = [a for a in plan.arms if a in best_lr]
        with open(ctx.path(f"{task}_runs.json"), "w") as handle:
            json.dump({"plan": dataclasses.asdict(plan), "best_lr": best_lr, "runs": runs}, handle)
        _summarise(ctx, task, plan, arms, runs, best_lr, base_scores)
    write_json(ctx.results, out / f"{task}_results.json")
    write_markdown(
        ctx.results, out / f"{task}_results.md", title=f"ptmoe reduced {task} ({args.what})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
