"""The pdssm benchmark suite (``neurips25 bench pdssm``).

Quality (the reduced reproduction, real training on the synthetic tasks):

* ``s3_state_tracking``: S3 word problem, one layer, train length 16, test at 16/64/256; PD-SSM
  (N = 8) against the complex-diagonal SSM (N = 16). Quick: one seed, 1000 steps. Full: 3 seeds,
  1500 steps, plus the row orientation (official PyTorch numerics) and the dense-transition SSM.
* ``a4_state_tracking`` (full): A4, PD-SSM N = 16 and N = 32 against complex-diagonal N = 32.
* ``fsa_tasks`` (full): parity, even_pairs, cycle_nav, mod_arith_no_brack; two layers,
  N = E = 32, train lengths 3–40, test 40–256, max validation accuracy over the run.

Speed (CPU, one thread): forward+backward time and peak RSS of the PD recurrence with the
sequential, torch-parallel and dense (official-style) scans as N grows at fixed tokens, with the
complex-diagonal recurrence and the P generator (O(K·N²) per token) timed separately.

Training and timing pin one intra-op thread: these are tiny tensors on a shared 2-core machine,
where a second thread made training ~30× slower.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys

import torch

from neurips25_core.bench import (
    Context,
    Suite,
    peak_rss_subprocess,
    plot_bars,
    plot_lines,
    time_fn,
)

SUITE = Suite(
    name="pdssm",
    paper="Structured Sparse Transition Matrices to Enable State Tracking in State-Space Models",
    url="https://arxiv.org/abs/2509.22284",
)


@contextlib.contextmanager
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _train_eval(
    task, model_kwargs, steps, train_lengths, test_lengths, seed, lr=1e-2, eval_every=0, desc=""
):
    """Train one model; return accuracies per test length (max over evaluations if eval_every)."""
    progress = sys.stderr.isatty()  # per-run bars only in a terminal, not in logs
    from .layer import PDSSM
    from .train import evaluate, train_task

    torch.manual_seed(seed)
    model = PDSSM(task.vocab_size, task.num_classes, **model_kwargs)
    lo, hi = train_lengths
    checkpoints = []
    if eval_every:
        done = 0
        seconds = 0.0
        # Train in segments so the one-cycle schedule still spans the whole run: one optimizer,
        # evaluated between segments (the official protocol reports the max validation accuracy).
        from .train import Trainer

        trainer = Trainer(
            model, task, steps, lo, hi, lr=lr, seed=seed, desc=desc, progress=progress
        )
        while done < steps:
            n = min(eval_every, steps - done)
            seconds += trainer.run(n)
            done += n
            checkpoints.append(
                {
                    name: evaluate(model, task, *rng, num_samples=256)
                    for name, rng in test_lengths.items()
                }
            )
        losses = trainer.losses
    else:
        result = train_task(
            model, task, steps, lo, hi, lr=lr, seed=seed, desc=desc, progress=progress
        )
        seconds, losses = result.seconds, result.losses
        checkpoints.append(
            {
                name: evaluate(model, task, *rng, num_samples=512 if rng[0] <= 64 else 256)
                for name, rng in test_lengths.items()
            }
        )
    best = {
        name: {k: max(c[name][k] for c in checkpoints) for k in ("token_acc", "final_acc")}
        for name in test_lengths
    }
    return {"seconds": seconds, "final_loss": sum(losses[-20:]) / min(20, len(losses)), "acc": best}


def _group_case(
    ctx: Context, task_name: str, configs: dict, steps: int, seeds: tuple[int, ...], baseline: str
):
    from .tasks import get_task

    task = get_task(task_name)
    lengths = {"16": (16, 16), "64": (64, 64), "256": (256, 256)}
    runs: dict[str, list[dict]] = {}
    with _one_thread():
        for label, kwargs in configs.items():
            runs[label] = []
            for seed in seeds:
                r = _train_eval(
                    task,
                    kwargs,
                    steps,
                    (16, 16),
                    lengths,
                    seed,
                    desc=f"{task_name} {label} s{seed}",
                )
                r["seed"] = seed
                runs[label].append(r)
                ctx.log(
                    f"  {task_name} {label} seed {seed}: "
                    + ", ".join(
                        f"len {k}: tok {v['token_acc']:.3f} final {v['final_acc']:.3f}"
                        for k, v in r["acc"].items()
                    )
                    + f" ({r['seconds']:.0f} s)"
                )
    ctx.path(f"{task_name.lower()}_runs.json").write_text(json.dumps(runs, indent=2) + "\n")

    def stat(label, length, key, fn):
        return fn([r["acc"][length][key] for r in runs[label]])

    for label in configs:
        for length in lengths:
            base = {}
            if label != baseline:
                base = {
                    "baseline": baseline,
                    "baseline_value": stat(baseline, length, "final_acc", max),
                }
            common = {"model": label, "length": int(length), "seeds": len(seeds), "steps": steps}
            ctx.record(
                "final_acc_best",
                stat(label, length, "final_acc", max),
                "fraction",
                lower_is_better=False,
                **base,
                **common,
            )
            if label != baseline:
                base["baseline_value"] = stat(baseline, length, "final_acc", statistics.mean)
            ctx.record(
                "final_acc_mean",
                stat(label, length, "final_acc", statistics.mean),
                "fraction",
                lower_is_better=False,
                **base,
                **common,
            )
            ctx.record(
                "token_acc_mean",
                stat(label, length, "token_acc", statistics.mean),
                "fraction",
                lower_is_better=False,
                **common,
            )
    plot_bars(
        [f"len {k}" for k in lengths],
        {
            label: [stat(label, k, "final_acc", statistics.mean) for k in lengths]
            for label in configs
        },
        ctx.path(f"{task_name.lower()}_accuracy.png"),
        ylabel=f"final-state accuracy (mean of {len(seeds)} seeds)",
        title=f"{task_name}: trained at length 16, {steps} steps",
    )


@SUITE.case("s3_state_tracking", kind="quality", modes=("quick", "full"))
def s3_state_tracking(ctx: Context) -> None:
    """S3 state tracking, 1 layer: PD-SSM vs complex-diagonal, length generalisation 16 → 64/256."""
    configs = {
        "pd_N8": {"d_model": 8, "state_size": 8, "num_layers": 1},
        "diag_N16": {"d_model": 16, "state_size": 16, "num_layers": 1, "transition": "diagonal"},
    }
    if not ctx.quick:
        configs["pd_row_N8"] = {
            "d_model": 8,
            "state_size": 8,
            "num_layers": 1,
            "orientation": "row",
        }
        configs["dense_N8"] = {
            "d_model": 8,
            "state_size": 8,
            "num_layers": 1,
            "transition": "dense",
        }
    steps, seeds = (1000, (0,)) if ctx.quick else (1500, (0, 1, 2))
    _group_case(ctx, "S3", configs, steps, seeds, baseline="diag_N16")


@SUITE.case("a4_state_tracking", kind="quality", modes=("full",))
def a4_state_tracking(ctx: Context) -> None:
    """A4 state tracking (stretch), 1 layer: PD-SSM N = 16/32 vs complex-diagonal N = 32."""
    configs = {
        "pd_N16": {"d_model": 16, "state_size": 16, "num_layers": 1},
        "pd_N32": {"d_model": 32, "state_size": 32, "num_layers": 1},
        "diag_N32": {"d_model": 32, "state_size": 32, "num_layers": 1, "transition": "diagonal"},
    }
    _group_case(ctx, "A4", configs, 2000, (0, 1, 2), baseline="diag_N32")


FSA_STEPS = 1000
FSA_SEEDS = (0, 1)


@SUITE.case("fsa_tasks", kind="quality", modes=("full",))
def fsa_tasks(ctx: Context) -> None:
    """The four official formal-language tasks, reduced: 2 layers, N = E = 32, max val accuracy."""
    from .tasks import FSA_TASKS, get_task

    models = {
        "pd": {"d_model": 32, "state_size": 32, "num_layers": 2},
        "diag": {"d_model": 32, "state_size": 32, "num_layers": 2, "transition": "diagonal"},
    }
    table: dict[str, dict[str, list[float]]] = {m: {} for m in models}
    with _one_thread():
        for name in FSA_TASKS:
            task = get_task(name)
            for label, kwargs in models.items():
                accs = []
                for seed in FSA_SEEDS:
                    r = _train_eval(
                        task,
                        kwargs,
                        FSA_STEPS,
                        (3, 40),
                        {"40-256": (40, 256)},
                        seed,
                        eval_every=FSA_STEPS // 4,
                        desc=f"{name} {label} s{seed}",
                    )
                    accs.append(r["acc"]["40-256"]["final_acc"])
                    ctx.log(
                        f"  {name} {label} seed {seed}: max val acc {accs[-1]:.3f} ({r['seconds']:.0f} s)"
                    )
                table[label][name] = accs
            ctx.record(
                "max_val_acc_mean",
                statistics.mean(table["pd"][name]),
                "fraction",
                baseline="diag",
                baseline_value=statistics.mean(table["diag"][name]),
                lower_is_better=False,
                task=name,
                seeds=len(FSA_SEEDS),
                steps=FSA_STEPS,
            )
    avg = {m: statistics.mean(statistics.mean(v) for v in table[m].values()) for m in models}
    ctx.record(
        "max_val_acc_average",
        avg["pd"],
        "fraction",
        baseline="diag",
        baseline_value=avg["diag"],
        lower_is_better=False,
        steps=FSA_STEPS,
    )
    ctx.path("fsa_runs.json").write_text(json.dumps(table, indent=2) + "\n")
    plot_bars(
        list(FSA_TASKS),
        {m: [statistics.mean(table[m][t]) for t in FSA_TASKS] for m in models},
        ctx.path("fsa_accuracy.png"),
        ylabel=f"max val. accuracy, lengths 40-256 (mean of {len(FSA_SEEDS)} seeds)",
        title=f"Formal-language tasks, 2 layers, N = E = 32, {FSA_STEPS} steps",
    )


# ----------------------------------------------------------------------------- speed

_SPEED_SETUP = """
import torch
torch.set_num_threads(1)
from pdssm import pd_scan
B, L, N = {batch}, {length}, {size}
g = torch.Generator().manual_seed(0)
p = torch.randint(0, N, (B, L, N), generator=g)
d = torch.polar(0.9 * torch.rand(B, L, N, generator=g), torch.rand(B, L, N, generator=g)).requires_grad_()
b = torch.randn(B, L, N, dtype=torch.complex64, generator=g).requires_grad_()
"""


def _scan_step(backend, p, d, b):
    if backend == "diagonal":
        # The complex-diagonal recurrence x_t = d_t ⊙ x_{t-1} + b_t (P = I), plain autograd.
        x = torch.zeros_like(b[:, 0])
        states = []
        for d_t, b_t in zip(d.unbind(1), b.unbind(1)):
            x = d_t * x + b_t
            states.append(x)
        out = torch.stack(states, 1)
    else:
        from .ops import pd_scan

        out = pd_scan(p, d, b, backend=backend)
    out.real.sum().backward()


def _generator_step(u, selector, dictionary):
    """The P generator of one layer for B·L tokens: softmax selection, Σ_k s_k M_k, column softmax."""
    weights = torch.softmax(u @ selector, dim=-1)
    logits = torch.einsum("blk,kmn->blnm", weights, dictionary)
    soft = torch.softmax(logits, dim=-1)
    (soft * torch.randn_like(soft)).sum().backward()


@SUITE.case("scan_speed", kind="speed", modes=("quick", "full"))
def scan_speed(ctx: Context) -> None:
    """Forward+backward time and peak RSS of the PD recurrence as N grows at fixed B·L (CPU)."""
    batch, length = 4, 128
    sizes = [16, 32, 64] if ctx.quick else [16, 32, 64, 128, 256]
    backends = ["sequential", "torch", "dense", "diagonal"]
    times: dict[str, list[float]] = {k: [] for k in [*backends, "generator (K=8)"]}
    memory: dict[str, list[float]] = {k: [] for k in ("sequential", "torch", "dense")}
    with _one_thread():
        for n in sizes:
            g = torch.Generator().manual_seed(0)
            p = torch.randint(0, n, (batch, length, n), generator=g)
            d = torch.polar(
                0.9 * torch.rand(batch, length, n, generator=g),
                torch.rand(batch, length, n, generator=g),
            )
            b = torch.randn(batch, length, n, dtype=torch.complex64, generator=g)
            for backend in backends:
                dd, bb = d.clone().requires_grad_(), b.clone().requires_grad_()
                t = time_fn(
                    lambda backend=backend, p=p, dd=dd, bb=bb: _scan_step(backend, p, dd, bb),
                    warmup=1,
                    min_time=0.3,
                    max_repeats=20,
                )
                times[backend].append(t.median)
            u = torch.randn(batch, length, n, requires_grad=True)
            selector = torch.randn(n, 8, requires_grad=True)
            dictionary = torch.randn(8, n, n, requires_grad=True)
            t = time_fn(
                lambda u=u, s=selector, m=dictionary: _generator_step(u, s, m),
                warmup=1,
                min_time=0.3,
                max_repeats=20,
            )
            times["generator (K=8)"].append(t.median)
            dense_t = times["dense"][-1]
            for backend in ("sequential", "torch"):
                ctx.record(
                    "fwd_bwd_time",
                    times[backend][-1],
                    "s",
                    baseline="dense N×N loop (official style)",
                    baseline_value=dense_t,
                    scan=backend,
                    N=n,
                    B=batch,
                    L=length,
                )
            ctx.record("fwd_bwd_time", dense_t, "s", scan="dense", N=n, B=batch, L=length)
            ctx.record(
                "fwd_bwd_time",
                times["diagonal"][-1],
                "s",
                scan="diagonal (P=I)",
                N=n,
                B=batch,
                L=length,
            )
            ctx.record(
                "generator_fwd_bwd_time",
                times["generator (K=8)"][-1],
                "s",
                baseline="sequential PD recurrence",
                baseline_value=times["sequential"][-1],
                N=n,
                K=8,
                B=batch,
                L=length,
            )
            for backend in memory:
                setup = _SPEED_SETUP.format(batch=batch, length=length, size=n)
                code = f"x = pd_scan(p, d, b, backend={backend!r}); x.real.sum().backward()"
                memory[backend].append(peak_rss_subprocess(code, setup=setup)["delta"] / 2**20)
            for backend in ("sequential", "torch"):
                ctx.record(
                    "fwd_bwd_peak_rss",
                    memory[backend][-1],
                    "MiB",
                    baseline="dense N×N loop (official style)",
                    baseline_value=memory["dense"][-1],
                    scan=backend,
                    N=n,
                    B=batch,
                    L=length,
                )
            ctx.log(
                f"  N={n}: "
                + ", ".join(f"{k} {v[-1] * 1e3:.1f} ms" for k, v in times.items())
                + " | RSS "
                + ", ".join(f"{k} {v[-1]:.0f} MiB" for k, v in memory.items())
            )
    # The other regime: a training-sized batch, where the work (not per-op overhead) dominates and
    # the O(L·N·log L) parallel scan loses to the O(L·N) loop on a CPU.
    with _one_thread():
        big = {}
        g = torch.Generator().manual_seed(0)
        bb_, ll_, nn_ = 64, 256, 64
        p = torch.randint(0, nn_, (bb_, ll_, nn_), generator=g)
        d = torch.polar(
            0.9 * torch.rand(bb_, ll_, nn_, generator=g), torch.rand(bb_, ll_, nn_, generator=g)
        )
        b = torch.randn(bb_, ll_, nn_, dtype=torch.complex64, generator=g)
        for backend in ("sequential", "torch"):
            dd, bb = d.clone().requires_grad_(), b.clone().requires_grad_()
            big[backend] = time_fn(
                lambda backend=backend, p=p, dd=dd, bb=bb: _scan_step(backend, p, dd, bb),
                warmup=1,
                repeats=3,
            ).median
        ctx.record(
            "fwd_bwd_time",
            big["torch"],
            "s",
            baseline="sequential",
            baseline_value=big["sequential"],
            scan="torch",
            N=nn_,
            B=bb_,
            L=ll_,
        )
        ctx.log(
            f"  B={bb_} L={ll_} N={nn_}: sequential {big['sequential'] * 1e3:.0f} ms, torch parallel {big['torch'] * 1e3:.0f} ms"
        )
    plot_lines(
        sizes,
        {k: [v * 1e3 for v in vs] for k, vs in times.items()},
        ctx.path("scan_time.png"),
        xlabel="state size N",
        ylabel="forward+backward time (ms)",
        title=f"PD recurrence, B={batch}, L={length}, CPU 1 thread",
        logx=True,
        logy=True,
    )
    plot_lines(
        sizes,
        memory,
        ctx.path("scan_memory.png"),
        xlabel="state size N",
        ylabel="peak RSS above setup (MiB)",
        title=f"PD recurrence fwd+bwd memory, B={batch}, L={length}",
        logx=True,
        logy=True,
    )
