"""The pdssm benchmark suite (``neurips25 bench pdssm``).

Quality (the reduced reproduction, real training on the synthetic tasks):

* ``s3_state_tracking``: S3 word problem, one layer, train length 16, test at 16/64/256; PD-SSM
  (N = 8) against the complex-diagonal SSM (N = 16). Smoke: 20 steps. Quick: one seed, 1000
  steps. Full: 3 seeds, 1500 steps, plus the row orientation (official PyTorch numerics) and the
  dense-transition SSM.
* ``a4_state_tracking``: A4, PD-SSM against complex-diagonal N = 32. Smoke: 20 steps. Quick:
  PD-SSM N = 16 only, one seed, 300 steps (too short to learn A4: a run-it check with real
  numbers). Full: N = 16 and N = 32, 3 seeds, 2000 steps.
* ``fsa_tasks``: parity, even_pairs, cycle_nav, mod_arith_no_brack; two layers, train lengths
  3–40, test 40–256, max validation accuracy over the run. Smoke: N = E = 8, 20 steps, parity
  only. Quick: N = E = 16, 80 steps, one seed, all four tasks (too short to learn them). Full:
  N = E = 32, 1000 steps, 2 seeds.

Speed (CPU, one thread): forward+backward time and peak RSS of the PD recurrence with the
sequential, torch-parallel and dense (official-style) scans as N grows at fixed tokens, with the
complex-diagonal recurrence and the P generator (O(K·N²) per token) in the same interleaved
comparison (``neurips25_core.bench.compare``, medians); and a whole PD-SSM layer (generator, D
MLPs, scan, readout) forward+backward with the sequential scan against the same layer with the
dense official-style scan, outputs checked equal first.

Training and timing pin one intra-op thread (``neurips25_core.bench.single_thread``): these are
tiny tensors on a shared 2-core machine, where a second thread made training ~30× slower.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys

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
    name="pdssm",
    paper="Structured Sparse Transition Matrices to Enable State Tracking in State-Space Models",
    url="https://arxiv.org/abs/2509.22284",
)


def _train_eval(
    task,
    model_kwargs,
    steps,
    train_lengths,
    test_lengths,
    seed,
    lr=1e-2,
    eval_every=0,
    desc="",
    eval_samples=None,
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
                    name: evaluate(model, task, *rng, num_samples=eval_samples or 256)
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
                name: evaluate(
                    model,
                    task,
                    *rng,
                    num_samples=eval_samples or (512 if rng[0] <= 64 else 256),
                )
                for name, rng in test_lengths.items()
            }
        )
    best = {
        name: {k: max(c[name][k] for c in checkpoints) for k in ("token_acc", "final_acc")}
        for name in test_lengths
    }
    return {"seconds": seconds, "final_loss": sum(losses[-20:]) / min(20, len(losses)), "acc": best}


def _group_case(
    ctx: Context,
    task_name: str,
    configs: dict,
    steps: int,
    seeds: tuple[int, ...],
    baseline: str,
    eval_samples: int | None = None,
):
    from .tasks import get_task

    task = get_task(task_name)
    lengths = {"16": (16, 16), "64": (64, 64), "256": (256, 256)}
    runs: dict[str, list[dict]] = {}
    with single_thread():
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
                    eval_samples=eval_samples,
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


@SUITE.case("s3_state_tracking", kind="quality")
def s3_state_tracking(ctx: Context) -> None:
    """S3 state tracking, 1 layer: PD-SSM vs complex-diagonal, length generalisation 16 → 64/256."""
    configs = {
        "pd_N8": {"d_model": 8, "state_size": 8, "num_layers": 1},
        "diag_N16": {"d_model": 16, "state_size": 16, "num_layers": 1, "transition": "diagonal"},
    }
    if ctx.full:
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
    steps = ctx.pick(smoke=20, quick=1000, full=1500)
    seeds = ctx.pick(smoke=(0,), quick=(0,), full=(0, 1, 2))
    eval_samples = ctx.pick(smoke=32, quick=None, full=None)
    _group_case(ctx, "S3", configs, steps, seeds, baseline="diag_N16", eval_samples=eval_samples)


@SUITE.case("a4_state_tracking", kind="quality")
def a4_state_tracking(ctx: Context) -> None:
    """A4 state tracking (stretch), 1 layer: PD-SSM N = 16/32 vs complex-diagonal N = 32."""
    configs = {
        "pd_N16": {"d_model": 16, "state_size": 16, "num_layers": 1},
        "pd_N32": {"d_model": 32, "state_size": 32, "num_layers": 1},
        "diag_N32": {"d_model": 32, "state_size": 32, "num_layers": 1, "transition": "diagonal"},
    }
    if not ctx.full:
        del configs["pd_N32"]
    steps = ctx.pick(smoke=20, quick=300, full=2000)
    seeds = ctx.pick(smoke=(0,), quick=(0,), full=(0, 1, 2))
    eval_samples = ctx.pick(smoke=32, quick=128, full=None)
    _group_case(ctx, "A4", configs, steps, seeds, baseline="diag_N32", eval_samples=eval_samples)


FSA_STEPS = 1000
FSA_SEEDS = (0, 1)


@SUITE.case("fsa_tasks", kind="quality")
def fsa_tasks(ctx: Context) -> None:
    """The four official formal-language tasks, reduced: 2 layers, N = E = 32, max val accuracy."""
    from .tasks import FSA_TASKS, get_task

    width = ctx.pick(smoke=8, quick=16, full=32)
    steps = ctx.pick(smoke=20, quick=80, full=FSA_STEPS)
    seeds = ctx.pick(smoke=(0,), quick=(0,), full=FSA_SEEDS)
    tasks = ctx.pick(smoke=("parity",), quick=tuple(FSA_TASKS), full=tuple(FSA_TASKS))
    eval_samples = ctx.pick(smoke=32, quick=64, full=256)
    models = {
        "pd": {"d_model": width, "state_size": width, "num_layers": 2},
        "diag": {"d_model": width, "state_size": width, "num_layers": 2, "transition": "diagonal"},
    }
    table: dict[str, dict[str, list[float]]] = {m: {} for m in models}
    with single_thread():
        for name in tasks:
            task = get_task(name)
            for label, kwargs in models.items():
                accs = []
                for seed in seeds:
                    r = _train_eval(
                        task,
                        kwargs,
                        steps,
                        (3, 40),
                        {"40-256": (40, 256)},
                        seed,
                        eval_every=max(1, steps // 4),
                        desc=f"{name} {label} s{seed}",
                        eval_samples=eval_samples,
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
                seeds=len(seeds),
                steps=steps,
                N=width,
            )
    avg = {m: statistics.mean(statistics.mean(v) for v in table[m].values()) for m in models}
    ctx.record(
        "max_val_acc_average",
        avg["pd"],
        "fraction",
        baseline="diag",
        baseline_value=avg["diag"],
        lower_is_better=False,
        steps=steps,
        N=width,
    )
    ctx.path("fsa_runs.json").write_text(json.dumps(table, indent=2) + "\n")
    plot_bars(
        list(tasks),
        {m: [statistics.mean(table[m][t]) for t in tasks] for m in models},
        ctx.path("fsa_accuracy.png"),
        ylabel=f"max val. accuracy, lengths 40-256 (mean of {len(seeds)} seeds)",
        title=f"Formal-language tasks, 2 layers, N = E = {width}, {steps} steps",
    )


# ----------------------------------------------------------------------------- speed

_SPEED_SETUP = """
import torch
torch.set_num_threads(1)  # core-helper-ok: runs in the fresh process of peak_rss_subprocess
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


def _record_timing(ctx: Context, cmp, name: str, metric: str, baseline: str | None, **params):
    """Record ``name``'s median from a :func:`compare` run, against ``baseline``'s median."""
    t = cmp.timings[name]
    load = (
        f"{cmp.load_start and round(cmp.load_start, 1)}->{cmp.load_end and round(cmp.load_end, 1)}"
    )
    extra = dict(p20=float(f"{t.p20:.4g}"), p80=float(f"{t.p80:.4g}"), rounds=cmp.rounds, load=load)
    if baseline is None:
        return ctx.record(metric, t.median, "s", **params, **extra)
    return ctx.record(
        metric,
        t.median,
        "s",
        baseline=_LABELS.get(baseline, baseline),
        baseline_value=cmp.timings[baseline].median,
        **params,
        **extra,
    )


_LABELS = {"dense": "dense N×N loop (official style)", "sequential": "sequential PD recurrence"}


@SUITE.case("scan_speed", kind="speed")
def scan_speed(ctx: Context) -> None:
    """Forward+backward time and peak RSS of the PD recurrence as N grows at fixed B·L (CPU).

    Every timing is a median of interleaved rounds (``compare``); the scans' outputs are checked
    equal before they are timed. ``layer_fwd_bwd_time`` times a whole PD-SSM layer (P generator,
    D generators, scan, readout, LayerNorm), so its ratio includes the O(K·N²)-per-token generator
    that the recurrence-only ratio leaves out.
    """
    from neurips25_core.testing import assert_close

    from .layer import PDSSMLayer
    from .ops import pd_scan

    batch, length = ctx.pick(smoke=(2, 32), quick=(4, 128), full=(4, 128))
    sizes = ctx.pick(smoke=[8, 16], quick=[16, 32, 64], full=[16, 32, 64, 128, 256])
    min_time = ctx.pick(smoke=0.02, quick=0.15, full=0.3)
    mem_sizes = ctx.pick(smoke=sizes[:1], quick=sizes, full=sizes)
    mem_backends = ctx.pick(
        smoke=("sequential", "dense"), quick=("sequential", "torch", "dense"), full=None
    ) or ("sequential", "torch", "dense")
    backends = ["sequential", "torch", "dense", "diagonal"]
    times: dict[str, list[float]] = {k: [] for k in [*backends, "generator (K=8)"]}
    layer_times: dict[str, list[float]] = {"PD layer, sequential scan": [], "PD layer, dense": []}
    memory: dict[str, list[float]] = {k: [] for k in mem_backends}
    with single_thread():
        for n in sizes:
            g = torch.Generator().manual_seed(0)
            p = torch.randint(0, n, (batch, length, n), generator=g)
            d = torch.polar(
                0.9 * torch.rand(batch, length, n, generator=g),
                torch.rand(batch, length, n, generator=g),
            )
            b = torch.randn(batch, length, n, dtype=torch.complex64, generator=g)
            ref = pd_scan(p, d, b, backend="sequential")
            for backend in ("torch", "dense"):
                assert_close(pd_scan(p, d, b, backend=backend), ref, rtol=1e-5)
            fns = {}
            for backend in backends:
                dd, bb = d.clone().requires_grad_(), b.clone().requires_grad_()
                fns[backend] = lambda backend=backend, p=p, dd=dd, bb=bb: _scan_step(
                    backend, p, dd, bb
                )
            u = torch.randn(batch, length, n, requires_grad=True)
            selector = torch.randn(n, 8, requires_grad=True)
            dictionary = torch.randn(8, n, n, requires_grad=True)
            fns["generator (K=8)"] = lambda u=u, s=selector, m=dictionary: _generator_step(u, s, m)
            cmp = compare(fns, baseline="dense", min_time=min_time, max_rounds=50)
            for name in fns:
                times[name].append(cmp.timings[name].median)
            common = dict(N=n, B=batch, L=length)
            for backend in ("sequential", "torch"):
                _record_timing(ctx, cmp, backend, "fwd_bwd_time", "dense", scan=backend, **common)
            _record_timing(ctx, cmp, "dense", "fwd_bwd_time", None, scan="dense", **common)
            _record_timing(
                ctx, cmp, "diagonal", "fwd_bwd_time", None, scan="diagonal (P=I)", **common
            )
            _record_timing(
                ctx, cmp, "generator (K=8)", "generator_fwd_bwd_time", "sequential", K=8, **common
            )

            # The whole layer: same weights, the sequential scan against the dense official-style
            # loop; outputs and gradients checked equal first (dropout off for the check).
            torch.manual_seed(0)
            ours = PDSSMLayer(n, n, dropout=0.0, backend="sequential")
            dense = PDSSMLayer(n, n, dropout=0.0, backend="dense")
            dense.load_state_dict(ours.state_dict())
            x = torch.randn(batch, length, n)
            # Checked in float64 (the straight-through dictionary gradient is tiny and float32
            # round-off dominates it), then timed in float32.
            o64, d64, x64 = copy.deepcopy(ours).double(), copy.deepcopy(dense).double(), x.double()
            y_ours, y_dense = o64(x64), d64(x64)
            assert_close(y_ours, y_dense, rtol=1e-10)
            g_ours = torch.autograd.grad(y_ours.square().sum(), list(o64.parameters()))
            g_dense = torch.autograd.grad(y_dense.square().sum(), list(d64.parameters()))
            for a_, b_ in zip(g_ours, g_dense):
                assert_close(a_, b_, rtol=1e-8)
            assert_close(ours(x), dense(x), rtol=1e-5)
            lcmp = compare(
                {
                    "PD layer, sequential scan": lambda m=ours, x=x: m(x).square().sum().backward(),
                    "PD layer, dense": lambda m=dense, x=x: m(x).square().sum().backward(),
                },
                baseline="PD layer, dense",
                min_time=min_time,
                max_rounds=50,
            )
            for name in layer_times:
                layer_times[name].append(lcmp.timings[name].median)
            _record_timing(
                ctx,
                lcmp,
                "PD layer, sequential scan",
                "layer_fwd_bwd_time",
                "PD layer, dense",
                d_model=n,
                **common,
            )

            if n in mem_sizes:
                for backend in memory:
                    setup = _SPEED_SETUP.format(batch=batch, length=length, size=n)
                    code = f"x = pd_scan(p, d, b, backend={backend!r}); x.real.sum().backward()"
                    memory[backend].append(peak_rss_subprocess(code, setup=setup)["delta"] / 2**20)
                for backend in memory:
                    if backend == "dense":
                        continue
                    ctx.record(
                        "fwd_bwd_peak_rss",
                        memory[backend][-1],
                        "MiB",
                        baseline="dense N×N loop (official style)",
                        baseline_value=memory["dense"][-1],
                        scan=backend,
                        **common,
                    )
            ctx.log(
                f"  N={n}: "
                + ", ".join(f"{k} {v[-1] * 1e3:.1f} ms" for k, v in times.items())
                + f" | layer: ours {layer_times['PD layer, sequential scan'][-1] * 1e3:.1f} ms, "
                f"dense {layer_times['PD layer, dense'][-1] * 1e3:.1f} ms"
                + (
                    " | RSS " + ", ".join(f"{k} {v[-1]:.0f} MiB" for k, v in memory.items())
                    if n in mem_sizes
                    else ""
                )
            )
        # The other regime: a training-sized batch, where the work (not per-op overhead)
        # dominates and the O(L·N·log L) parallel scan loses to the O(L·N) loop on a CPU.
        bb_, ll_, nn_ = ctx.pick(smoke=(8, 64, 16), quick=(64, 256, 64), full=(64, 256, 64))
        g = torch.Generator().manual_seed(0)
        p = torch.randint(0, nn_, (bb_, ll_, nn_), generator=g)
        d = torch.polar(
            0.9 * torch.rand(bb_, ll_, nn_, generator=g), torch.rand(bb_, ll_, nn_, generator=g)
        )
        b = torch.randn(bb_, ll_, nn_, dtype=torch.complex64, generator=g)
        fns = {}
        for backend in ("sequential", "torch"):
            dd, bb = d.clone().requires_grad_(), b.clone().requires_grad_()
            fns[backend] = lambda backend=backend, dd=dd, bb=bb: _scan_step(backend, p, dd, bb)
        big = compare(fns, baseline="sequential", rounds=ctx.pick(smoke=2, quick=3, full=5))
        _record_timing(
            ctx, big, "torch", "fwd_bwd_time", "sequential", scan="torch", N=nn_, B=bb_, L=ll_
        )
        ctx.log(
            f"  B={bb_} L={ll_} N={nn_}: sequential {big['sequential'].median * 1e3:.0f} ms, "
            f"torch parallel {big['torch'].median * 1e3:.0f} ms"
        )
    plot_lines(
        sizes,
        {
            **{k: [v * 1e3 for v in vs] for k, vs in times.items()},
            **{k: [v * 1e3 for v in vs] for k, vs in layer_times.items()},
        },
        ctx.path("scan_time.png"),
        xlabel="state size N",
        ylabel="forward+backward time (ms, median)",
        title=f"PD recurrence and layer, B={batch}, L={length}, CPU 1 thread",
        logx=True,
        logy=True,
    )
    plot_lines(
        mem_sizes,
        memory,
        ctx.path("scan_memory.png"),
        xlabel="state size N",
        ylabel="peak RSS above setup (MiB)",
        title=f"PD recurrence fwd+bwd memory, B={batch}, L={length}",
        logx=True,
        logy=True,
    )
