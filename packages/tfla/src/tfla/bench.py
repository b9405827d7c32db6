"""The tfla benchmark suite (``neurips25 bench tfla``).

Speed (CPU, torch paths, one intra-op thread via ``neurips25_core.bench.single_thread``): our
chunkwise form against the parallel form (the quadratic O(S²) reference) and the recurrent step
loop (the O(S) reference) as the sequence grows, forward and forward+backward, with peak memory;
and against the peer a user would pick instead, PyPI ``mlstm-kernels`` (its torch-native
chunkwise kernels: ``native_autograd``, whose gradient equals our default, and ``native_custbw``,
whose gradient equals our ``detach_denominator=True``), outputs and gradients checked equal
first, skipped with a message when the ``peers`` extra is not installed. Every timing is a
median of interleaved rounds (``neurips25_core.bench.compare``). A chunk-size sweep. Quality:
mLSTMexp vs mLSTMsig vs a same-size transformers Llama trained on the stdlib byte corpus for
equal tokens (the paper's claim: sig matches exp). GPU timings at the paper's shapes live in
``benchmarks/gpu.py``.
"""

from __future__ import annotations

import json
import os

import torch

from neurips25_core.bench import (
    Context,
    Suite,
    compare,
    peak_rss_subprocess,
    plot_lines,
    single_thread,
)

SUITE = Suite(
    name="tfla",
    paper="Tiled Flash Linear Attention: More Efficient Linear RNN and xLSTM Kernels",
    url="https://arxiv.org/abs/2503.14376",
)

HEADS, HEAD_DIM = 4, 64
PARALLEL = "parallel (quadratic O(S²) reference)"
RECURRENT = "recurrent (step loop reference)"
PEER_AUTOGRAD = "mlstm_kernels native_autograd"
PEER_CUSTBW = "mlstm_kernels native_custbw"
PEER_MISSING = (
    "peer mlstm-kernels is not installed: its rows are skipped "
    "(install the peers extra: uv sync --package tfla --extra peers)"
)


def _inputs(S: int, requires_grad: bool = False, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, HEADS, S, HEAD_DIM, generator=g) for _ in range(3))
    i = torch.randn(1, HEADS, S, generator=g)
    f = torch.randn(1, HEADS, S, generator=g) + 3.0
    return [x.requires_grad_(requires_grad) for x in (q, k, v, i, f)]


def peer_kernels() -> dict | None:
    """The peer's torch-native chunkwise kernels, or None when ``mlstm-kernels`` is absent."""
    import importlib

    try:
        # Imported on demand: the peer is the optional ``peers`` extra.
        chunkwise = importlib.import_module("mlstm_kernels.torch.chunkwise")
    except ImportError:
        return None
    return {
        PEER_AUTOGRAD: chunkwise.mlstm_chunkwise__native_autograd,
        PEER_CUSTBW: chunkwise.mlstm_chunkwise__native_custbw,
    }


def _fns(method: str, chunk_size: int = 64):
    """method -> f(q, k, v, i, f) -> h. Methods: chunkwise, chunkwise_detached, parallel,
    recurrent, and the peer's names."""
    from tfla.chunkwise import mlstm_chunkwise
    from tfla.reference import mlstm_parallel, mlstm_recurrent

    if method == "chunkwise":
        return lambda *a: mlstm_chunkwise(*a, chunk_size=chunk_size)
    if method == "chunkwise_detached":
        return lambda *a: mlstm_chunkwise(*a, chunk_size=chunk_size, detach_denominator=True)
    if method == "parallel":
        return mlstm_parallel
    if method == "recurrent":
        return mlstm_recurrent
    peers = peer_kernels()
    if peers is None or method not in peers:
        raise ValueError(f"method: {method!r} is not available ({PEER_MISSING})")
    kernel = peers[method]
    return lambda *a: kernel(*a, chunk_size=chunk_size)


def _runner(method: str, S: int, backward: bool, chunk_size: int = 64, seed: int = 0):
    """A zero-argument call running one forward (under no_grad) or forward+backward."""
    fn = _fns(method, chunk_size)
    xs = _inputs(S, requires_grad=backward, seed=seed)
    if backward:
        g = torch.randn(1, HEADS, S, HEAD_DIM, generator=torch.Generator().manual_seed(seed + 1))

        def run():
            return torch.autograd.grad(fn(*xs), xs, g)
    else:

        def run():
            with torch.no_grad():
                return fn(*xs)

    return run


def _check_equal(a: str, b: str, S: int, chunk_size: int = 64) -> None:
    """Outputs and input gradients of two methods agree (float32 round-off) before timing."""
    from neurips25_core.testing import assert_close

    h_a, h_b = _runner(a, S, False, chunk_size)(), _runner(b, S, False, chunk_size)()
    assert_close(h_a, h_b, rtol=1e-5, name=f"h of {a} vs {b}")
    for ga, gb, name in zip(
        _runner(a, S, True, chunk_size)(), _runner(b, S, True, chunk_size)(), "qkvif"
    ):
        assert_close(ga, gb, rtol=1e-4, name=f"d{name} of {a} vs {b}")


def _record(ctx: Context, cmp, name: str, metric: str, baseline: str | None, label=None, **params):
    """Record ``name``'s median from a :func:`compare` run against ``baseline``'s median."""
    t = cmp.timings[name]
    ls, le = cmp.load_start, cmp.load_end
    load = f"{None if ls is None else round(ls, 1)}->{None if le is None else round(le, 1)}"
    extra = dict(p20=float(f"{t.p20:.4g}"), p80=float(f"{t.p80:.4g}"), rounds=cmp.rounds, load=load)
    if baseline is None:
        return ctx.record(metric, t.median, "s", **params, **extra)
    return ctx.record(
        metric,
        t.median,
        "s",
        baseline=label or baseline,
        baseline_value=cmp.timings[baseline].median,
        **params,
        **extra,
    )


_MEM_SETUP = """
import torch
torch.set_num_threads(1)  # core-helper-ok: the fresh process of peak_rss_subprocess
from tfla.bench import _runner
_runner({method!r}, 64, True)()  # warm-up: thread pool, autograd engine, allocator
run = _runner({method!r}, {S}, True)
"""


def peak_memory(method: str, S: int) -> int:
    """Extra peak RSS (bytes) of one forward+backward, in a fresh process (core helper)."""
    setup = _MEM_SETUP.format(method=method, S=S)
    return peak_rss_subprocess("run()", setup=setup)["delta"]


@SUITE.case("speed_vs_length", kind="speed")
def speed_vs_length(ctx: Context) -> None:
    """Time and peak memory of our chunkwise (L=64) vs the parallel and recurrent references and
    the mlstm-kernels peer as S grows (B=1, H=4, D=64, CPU, one thread)."""
    lengths = ctx.pick(
        smoke=[128, 256],
        quick=[256, 1024, 2048],
        full=[256, 512, 1024, 2048, 4096, 8192, 16384],
    )
    par_max = ctx.pick(smoke=256, quick=2048, full=4096)
    rec_max = ctx.pick(smoke=128, quick=256, full=512)
    rec_bwd = ctx.pick(smoke=False, quick=False, full=True)
    min_time = ctx.pick(smoke=0.02, quick=0.1, full=0.5)
    min_rounds = ctx.pick(smoke=2, quick=3, full=5)
    mem_lengths = ctx.pick(
        smoke=[256], quick=[512, 2048], full=[512, 1024, 2048, 4096, 8192, 16384]
    )
    peers = peer_kernels()
    if peers is None:
        ctx.log("  " + PEER_MISSING)
    series: dict[str, list[float]] = {}
    with single_thread():
        if peers is not None:
            _check_equal("chunkwise", PEER_AUTOGRAD, lengths[0])
            _check_equal("chunkwise_detached", PEER_CUSTBW, lengths[0])
        for backward in (False, True):
            tag = "fwd+bwd" if backward else "fwd"
            for S in lengths:
                fns = {"chunkwise": _runner("chunkwise", S, backward)}
                if par_max >= S:
                    fns["parallel"] = _runner("parallel", S, backward)
                if rec_max >= S and (rec_bwd or not backward):
                    fns["recurrent"] = _runner("recurrent", S, backward)
                if peers is not None:
                    fns[PEER_AUTOGRAD] = _runner(PEER_AUTOGRAD, S, backward)
                    if backward:
                        fns["chunkwise_detached"] = _runner("chunkwise_detached", S, backward)
                        fns[PEER_CUSTBW] = _runner(PEER_CUSTBW, S, backward)
                cmp = compare(fns, baseline="chunkwise", min_time=min_time, min_rounds=min_rounds)
                common = dict(S=S, chunk_size=64)
                if "parallel" in fns:
                    _record(
                        ctx, cmp, "chunkwise", f"chunkwise_{tag}", "parallel", PARALLEL, **common
                    )
                else:
                    _record(ctx, cmp, "chunkwise", f"chunkwise_{tag}", None, **common)
                if "recurrent" in fns:
                    _record(
                        ctx, cmp, "chunkwise", f"chunkwise_{tag}_vs_recurrent", "recurrent",
                        RECURRENT, **common,
                    )  # fmt: skip
                if peers is not None:
                    _record(
                        ctx, cmp, "chunkwise", f"chunkwise_{tag}_vs_peer", PEER_AUTOGRAD, **common
                    )
                    if backward:
                        _record(
                            ctx, cmp, "chunkwise_detached", f"chunkwise_detached_{tag}_vs_peer",
                            PEER_CUSTBW, **common,
                        )  # fmt: skip
                for name in ("chunkwise", "parallel", "recurrent", PEER_AUTOGRAD):
                    t = cmp.timings[name].median if name in cmp.timings else float("nan")
                    series.setdefault(f"{name} {tag}", []).append(t)
                ctx.log(
                    f"  S={S} {tag}: "
                    + ", ".join(f"{n} {t.median * 1e3:.1f} ms" for n, t in cmp.timings.items())
                    + f" (load {cmp.load_start})"
                )
    series = {k: v for k, v in series.items() if any(x == x for x in v)}
    plot_lines(
        lengths,
        series,
        ctx.path("speed_vs_length.png"),
        xlabel="sequence length S",
        ylabel="seconds (median, 1 thread)",
        title="mLSTM on CPU: chunkwise vs references and mlstm-kernels (B=1, H=4, D=64)",
        logx=True,
        logy=True,
    )

    mem_series: dict[str, list[float]] = {"chunkwise fwd+bwd": [], "parallel fwd+bwd": []}
    for S in mem_lengths:
        pc = peak_memory("chunkwise", S) / 2**20
        pp = peak_memory("parallel", S) / 2**20 if par_max >= S else None
        mem_series["chunkwise fwd+bwd"].append(pc)
        mem_series["parallel fwd+bwd"].append(float("nan") if pp is None else pp)
        if pp is not None:
            ctx.record(
                "chunkwise_peak_memory", pc, "MiB", baseline=PARALLEL, baseline_value=pp, S=S
            )
        else:
            ctx.record("chunkwise_peak_memory", pc, "MiB", S=S)
    plot_lines(
        mem_lengths,
        mem_series,
        ctx.path("memory_vs_length.png"),
        xlabel="sequence length S",
        ylabel="extra peak RSS (MiB)",
        title="mLSTM fwd+bwd peak memory (B=1, H=4, D=64)",
        logx=True,
        logy=True,
    )


@SUITE.case("chunk_size_sweep", kind="speed")
def chunk_size_sweep(ctx: Context) -> None:
    """Chunkwise runtime vs chunk size at fixed S (ratios against the default L=64, same run)."""
    S = ctx.pick(smoke=256, quick=2048, full=8192)
    sizes = ctx.pick(
        smoke=[16, 64], quick=[16, 32, 64, 128, 256], full=[16, 32, 64, 128, 256, 512, 1024]
    )
    min_time = ctx.pick(smoke=0.02, quick=0.1, full=0.5)
    series: dict[str, list[float]] = {}
    with single_thread():
        for backward in (False, True):
            tag = "fwd+bwd" if backward else "fwd"
            fns = {f"L={L}": _runner("chunkwise", S, backward, chunk_size=L) for L in sizes}
            cmp = compare(fns, baseline="L=64", min_time=min_time, min_rounds=3)
            for L in sizes:
                base = None if L == 64 else "L=64"
                _record(ctx, cmp, f"L={L}", f"chunkwise_{tag}", base, "chunkwise L=64", S=S,
                        chunk_size=L)  # fmt: skip
            series[f"chunkwise {tag}"] = [cmp.timings[f"L={L}"].median for L in sizes]
    plot_lines(
        sizes,
        series,
        ctx.path("chunk_size_sweep.png"),
        xlabel="chunk size L",
        ylabel="seconds (median, 1 thread)",
        title=f"chunkwise mLSTM vs chunk size (S={S}, H=4, D=64)",
        logx=True,
    )


def _lm_loss(model, x, y):
    out = model(x)
    logits = out.logits if hasattr(out, "logits") else out
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1)
    )


def _param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@SUITE.case("lm_quality", kind="quality")
def lm_quality(ctx: Context) -> None:
    """mLSTMexp vs mLSTMsig vs a parameter-matched Llama on the stdlib bytes, equal tokens."""
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, tiny_llama, tiny_llama_config, train
    from tfla.layer import mLSTMLM

    corpus = stdlib_corpus()
    d, layers, heads, S, B, steps, seeds, eval_every = ctx.pick(
        smoke=(16, 1, 2, 32, 2, 4, [0], 2),
        quick=(64, 2, 2, 128, 8, 30, [0], 10),
        full=(128, 4, 4, 256, 16, 1200, [0, 1, 2], 100),
    )
    variants = [("mLSTMexp", "exp", True), ("mLSTMsig", "sig", False)]
    if ctx.full:
        variants.append(("mLSTMsig_norm", "sig", True))
        # Overrides for a shorter run of the full configuration (recorded in the results' params).
        steps = int(os.environ.get("TFLA_LM_STEPS", steps))
        seeds = [int(x) for x in os.environ.get("TFLA_LM_SEEDS", "0,1,2").split(",")]
        if os.environ.get("TFLA_LM_ABLATION", "1") == "0":
            variants = variants[:2]
    ablations = {"mLSTMsig_norm"}  # trained on the first seed only (time)
    eval_batches = ctx.pick(smoke=1, quick=4, full=20)
    finals: dict[str, list[float]] = {}
    curves: dict[str, list[float]] = {}
    eval_steps: list[int] = []
    info: dict[str, dict] = {}
    with single_thread():
        for seed in seeds:
            models = {}
            for name, variant, normalize in variants:
                if name in ablations and seed != seeds[0]:
                    continue
                torch.manual_seed(seed)
                models[name] = mLSTMLM(
                    d_model=d,
                    num_layers=layers,
                    num_heads=heads,
                    variant=variant,
                    normalize=normalize,
                    chunk_size=64,
                    backend="torch",
                )
            target = _param_count(models["mLSTMexp"])
            # A Llama of the same width/depth; its MLP width is chosen to match the parameter count.
            base = tiny_llama_config(
                hidden_size=d,
                num_layers=layers,
                num_heads=heads,
                max_position_embeddings=S,
                intermediate_size=32,
            )
            per_unit = 3 * d * layers  # parameters per unit of intermediate size
            inter = max(
                32,
                round(
                    (target - _param_count(tiny_llama(base, seed=seed)) + 32 * per_unit) / per_unit
                ),
            )
            models["Llama"] = tiny_llama(
                tiny_llama_config(
                    hidden_size=d,
                    num_layers=layers,
                    num_heads=heads,
                    max_position_embeddings=S,
                    intermediate_size=inter,
                ),
                seed=seed,
            )
            for name, model in models.items():
                res = train(
                    model,
                    corpus,
                    steps=steps,
                    batch_size=B,
                    seq_len=S,
                    seed=seed,
                    lr=3e-3,
                    loss_fn=_lm_loss,
                    desc=f"{name} seed {seed}",
                    eval_every=eval_every,
                    eval_batches=eval_batches,
                    progress=True,
                )
                losses = torch.tensor(res.losses)
                if not bool(torch.isfinite(losses).all()):
                    raise FloatingPointError(f"{name}: non-finite training loss")
                bpb = evaluate_bpb(
                    model,
                    corpus,
                    batch_size=B,
                    seq_len=S,
                    num_batches=eval_batches,
                    loss_fn=_lm_loss,
                )
                finals.setdefault(name, []).append(bpb)
                if seed == seeds[0]:
                    curves[name] = [b for _, b in res.val_bpb]
                    eval_steps = [s for s, _ in res.val_bpb]
                    k = max(1, steps // 10)
                    info[name] = dict(
                        params=_param_count(model),
                        tokens=res.tokens,
                        tokens_per_s=res.tokens / res.seconds,
                        first_loss=float(losses[:k].mean()),
                        last_loss=float(losses[-k:].mean()),
                    )
                ctx.log(
                    f"  {name} seed {seed}: val {bpb:.3f} bits/byte, {res.tokens / res.seconds:.0f} tokens/s"
                )
    mean = {n: sum(v) / len(v) for n, v in finals.items()}
    spread = {n: (max(v) - min(v)) if len(v) > 1 else 0.0 for n, v in finals.items()}
    for name in finals:
        kw = dict(
            params=info[name]["params"],
            tokens=info[name]["tokens"],
            seeds=len(finals[name]),
            spread=round(spread[name], 4),
            d_model=d,
            layers=layers,
            seq_len=S,
            steps=steps,
        )
        if name == "mLSTMexp":
            ctx.record(f"val_bpb_{name}", mean[name], "bits/byte", **kw)
        else:
            ctx.record(
                f"val_bpb_{name}",
                mean[name],
                "bits/byte",
                baseline="mLSTMexp",
                baseline_value=mean["mLSTMexp"],
                **kw,
            )
        ctx.record(
            f"tokens_per_s_{name}",
            info[name]["tokens_per_s"],
            "tokens/s",
            lower_is_better=False,
            params=info[name]["params"],
        )
        # Training must make progress (the quick run's check): the loss falls. A smoke run of a
        # few steps only checks that everything runs.
        if not ctx.smoke and not info[name]["last_loss"] < info[name]["first_loss"]:
            raise AssertionError(
                f"{name}: training loss did not fall ({info[name]['first_loss']:.3f} -> {info[name]['last_loss']:.3f})"
            )
    if eval_steps:
        plot_lines(
            eval_steps,
            curves,
            ctx.path("lm_quality.png"),
            xlabel="training step",
            ylabel="validation bits/byte",
            title=f"stdlib bytes, d={d}, {layers} layers, seed {seeds[0]}",
        )
    (ctx.path("lm_quality_details.json")).write_text(
        json.dumps(
            dict(
                final_bpb=finals,
                mean=mean,
                spread=spread,
                info=info,
                eval_steps=eval_steps,
                curves=curves,
            ),
            indent=2,
        )
    )
