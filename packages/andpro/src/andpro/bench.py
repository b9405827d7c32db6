"""The andpro benchmark suite (``neurips25 bench andpro``).

- ``attention_error`` (quality A): on the core's cached tiny Llama (stdlib bytes), the relative
  error of every layer's attention output after eviction, on the next 64 decoding queries and on
  the window queries, and the continuation's bits per byte with the press on; all scorers, budgets
  10/20/40 % (quick) of the context, several held-out windows (seeds), bootstrap 95 % CIs.
- ``retrieval`` (quality B): answer accuracy vs budget (2-40 % of the context) on multi-query
  associative recall (:mod:`andpro.retrieval`) with a 2-layer Llama trained here until it
  retrieves, question-aware and question-agnostic, bootstrap CIs over held-out contexts.
- ``overhead`` (speed): scoring + selection time per layer vs that layer's prefill, on CPU.
- ``prefill_decode`` (speed): model prefill with and without the press, a decode step, cache bytes.

Every case runs in every mode (``smoke`` at a toy size, ``quick``, ``full``); speed ratios are
interleaved medians from :func:`neurips25_core.bench.compare`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from andpro.metrics import attention_output_error
from andpro.press import Press
from andpro.scorers import (
    AnDProScorer,
    AttentionScorer,
    KNormScorer,
    RandomScorer,
    SnapKVScorer,
    StreamingLLMScorer,
)
from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread
from neurips25_core.progress import progress_bar

SUITE = Suite(
    name="andpro",
    paper="Accurate KV Cache Eviction via Anchor Direction Projection for Efficient LLM Inference",
    url="https://openreview.net/forum?id=Tdl89SZItB",
)


def make_press(row: str, budget, seed: int = 0, window: int | None = None) -> Press:
    """The press for one benchmark row (AnDPro defaults: w=32, max-pool 7, chunks of 4, adaptive).

    SnapKV rows keep no sink tokens (as the official SnapKV and kvpress: only the window is
    protected). KNorm, StreamingLLM and random keep AnDPro's 4 sinks and window and choose the rest,
    so they differ from AnDPro in the choice only. ``window`` overrides every row's window (with
    ``pool_kernel`` capped to it), for short contexts.
    """
    w = 32 if window is None else window
    official = dict(window=w, pool_kernel=7, chunk_size=4, sink_tokens=4)
    token = dict(window=w, pool_kernel=7, chunk_size=1, sink_tokens=4)
    snap = dict(window=w, pool_kernel=7, chunk_size=1, sink_tokens=0)
    rows = {
        "andpro": (AnDProScorer(), official, "adaptive"),
        "attention": (AttentionScorer(), official, "adaptive"),
        "andpro_uniform": (AnDProScorer(), official, "uniform"),
        "attention_uniform": (AttentionScorer(), official, "uniform"),
        "snapkv_w32_max7": (SnapKVScorer(pooling="max"), snap, "uniform"),
        "snapkv_kvpress": (
            SnapKVScorer(),
            dict(window=64, pool_kernel=5, chunk_size=1, sink_tokens=0),
            "uniform",
        ),
        "knorm": (KNormScorer(), token, "uniform"),
        "streaming_llm": (StreamingLLMScorer(), token, "uniform"),
        "random": (RandomScorer(seed), token, "uniform"),
    }
    scorer, kw, heads = rows[row]
    return Press(scorer, budget, head_budget=heads, **kw)


METRICS_A = ("decode", "decode_none", "decode_oproj", "window", "window_none", "bpb")
ROWS_A = [
    "andpro",
    "attention",
    "andpro_uniform",
    "attention_uniform",
    "snapkv_w32_max7",
    "snapkv_kvpress",
    "knorm",
    "streaming_llm",
    "random",
]


#: Long-context fine-tune of the core's tiny Llama per mode: (sequence length, steps, batch size).
LONG_CONTEXT = {"smoke": (96, 4, 2), "quick": (576, 200, 4), "full": (576, 200, 4)}


def long_context_llama(
    mode: str = "quick",
    seq_len: int | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    lr: float = 1e-3,
    progress: bool = True,
):
    """The core's pretrained tiny Llama for ``mode``, fine-tuned at ``seq_len`` bytes, cached.

    The core model degrades past its 128-byte training context (bits/byte 2.2 at positions < 128,
    3.4 at 320-576), so quality A would measure eviction on a broken model. A short fine-tune at
    ``seq_len`` fixes that. It is cached through :func:`neurips25_core.models.cached_checkpoint`;
    the key holds the base model's cache key, the corpus fingerprint and every argument of
    :func:`neurips25_core.models.train` (:func:`~neurips25_core.models.train_arguments`).
    ``smoke`` fine-tunes the core's toy model for a few steps (seconds on an empty cache).

    Returns:
        The model in eval mode, with ``model.neurips25_meta`` (``val_bpb``, ``seconds``, ``key``).
    """
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import (
        cached_checkpoint,
        evaluate_bpb,
        pretrained_tiny_llama_for,
        train,
        train_arguments,
    )

    d_len, d_steps, d_batch = LONG_CONTEXT[mode]
    seq_len = d_len if seq_len is None else seq_len
    steps = d_steps if steps is None else steps
    batch_size = d_batch if batch_size is None else batch_size
    model = pretrained_tiny_llama_for(mode, progress=progress)
    base_key = model.neurips25_meta["key"]
    corpus = stdlib_corpus()
    args = dict(
        steps=steps, lr=lr, batch_size=batch_size, seq_len=seq_len, warmup=max(1, steps // 10)
    )

    def build():
        res = train(model, corpus, progress=progress, desc="andpro: long-context fine-tune", **args)
        tail = res.losses[-20:]
        meta = {
            "seconds": res.seconds,
            "final_loss": sum(tail) / len(tail),
            "val_bpb": evaluate_bpb(
                model, corpus, seq_len=seq_len, num_batches=8 if mode != "smoke" else 1
            ),
        }
        return model.state_dict(), meta

    state, meta = cached_checkpoint(
        "andpro_longctx",
        {
            "base_model": base_key,
            "data": corpus.fingerprint,
            "train": train_arguments(**args),
            "version": 2,
        },
        build,
    )
    if meta["cached"]:
        model.load_state_dict(state)
    model.eval()
    model.neurips25_meta = meta
    return model


def bootstrap_ci(x, n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and percentile-bootstrap 95 % CI of the mean of ``x``."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return float(x.mean()), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (n, len(x)))].mean(1)
    return float(x.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


@torch.no_grad()
def capture_qkv(model, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per layer ``(q [B,H_q,T,d], k [B,H_kv,T,d], v)`` post-RoPE, from one full forward."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    captured: dict[int, tuple] = {}
    name = "andpro_capture"

    def capture(module, query, key, value, attention_mask, **kwargs):
        captured[module.layer_idx] = (query.detach(), key.detach(), value.detach())
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(name, capture)
    old = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        model(ids, use_cache=False)
    finally:
        model.config._attn_implementation = old
        AttentionInterface._global_mapping.pop(name, None)
    return [captured[i] for i in range(len(captured))]


@torch.no_grad()
def continuation_bpb(model, ids: torch.Tensor, context: int, press: Press | None) -> float:
    """Bits per byte of tokens ``context+1 ..`` given a (compressed) cache of the first ``context``."""
    from transformers import DynamicCache

    prompt, rest = ids[:, :context], ids[:, context:]
    if press is None:
        cache = DynamicCache(config=model.config)
        model(prompt, cache=cache)
        logits = model(rest, cache=cache).logits
    else:
        with press(model) as cache:
            model(prompt, cache=cache)
            logits = model(rest, cache=cache).logits
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), rest[:, 1:].reshape(-1)
    )
    return float(loss) / math.log(2)


def _summary_table(ctx, budgets, context, stats, full_bpb, n_seeds) -> None:
    """quality_a_table.md: mean [95% CI] per row and budget, for the main metrics."""
    lines = [
        f"Quality A: L={context}, {n_seeds} held-out windows, mean [95% bootstrap CI]. "
        f"Full-cache continuation bits/byte: {full_bpb[0]:.4f} [{full_bpb[1]:.4f}, {full_bpb[2]:.4f}].\n"
    ]
    for metric, title in (
        ("decode", "decode-query error (softmax renormalised)"),
        ("decode_none", "decode-query error (unnormalised, AnDPro's objective)"),
        ("window", "window-query error (softmax)"),
        ("window_none", "window-query error (unnormalised)"),
        ("bpb", "continuation bits/byte with the press"),
    ):
        lines.append(f"\n### {title}\n")
        lines.append(
            "| row | " + " | ".join(f"{int(100 * b)}% ({int(b * context)})" for b in budgets) + " |"
        )
        lines.append("|---|" + "---:|" * len(budgets))
        for row in ROWS_A:
            cells = []
            for b in budgets:
                st = stats.get((row, b))
                cells.append(
                    "n/a"
                    if st is None
                    else f"{st[metric][0]:.4f} [{st[metric][1]:.4f}, {st[metric][2]:.4f}]"
                )
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
    ctx.path("quality_a_table.md").write_text("\n".join(lines) + "\n")


def _plot(ctx, budgets, stats, rows, key, fname, ylabel, title):
    series = {r: [stats[(r, b)][key][0] for b in budgets] for r in rows}
    errors = {
        r: [(stats[(r, b)][key][2] - stats[(r, b)][key][1]) / 2 for b in budgets] for r in rows
    }
    plot_lines(
        [100 * b for b in budgets],
        series,
        ctx.path(fname),
        xlabel="budget (% of context)",
        ylabel=ylabel,
        title=title,
        logy=key != "bpb",
        errors=errors,
    )


@SUITE.case("attention_error", kind="quality")
def attention_error(ctx: Context) -> None:
    """Quality A: attention-output error vs budget on the core's cached tiny Llama (stdlib bytes)."""
    with single_thread(), torch.no_grad():
        _attention_error(ctx)


def _attention_error(ctx: Context) -> None:
    from neurips25_core.data import stdlib_corpus

    torch.manual_seed(0)
    model = long_context_llama(ctx.mode)
    ctx.log(f"model: core tiny Llama fine-tuned at long context, {model.neurips25_meta}")
    corpus = stdlib_corpus()
    context = ctx.pick(smoke=64, quick=512, full=512)
    n_dec = ctx.pick(smoke=16, quick=64, full=64)
    seeds = range(ctx.pick(smoke=2, quick=6, full=24))
    budgets = ctx.pick(smoke=(0.6, 0.8), quick=(0.1, 0.2, 0.4), full=(0.08, 0.1, 0.2, 0.4))
    val = corpus.val

    per_seed: dict[tuple[str, float], dict[str, list[float]]] = {}
    bpb_full = []
    for seed in progress_bar(seeds, desc="andpro quality A", leave=False):
        g = torch.Generator().manual_seed(1000 + seed)
        start = int(torch.randint(0, len(val) - context - n_dec - 1, (1,), generator=g))
        ids = val[start : start + context + n_dec].long()[None]
        layers = capture_qkv(model, ids)
        bpb_full.append(continuation_bpb(model, ids, context, None))
        for row in ROWS_A:
            for frac in budgets:
                press = make_press(row, frac, seed=seed)
                if int(frac * context) < press.sink_tokens + press.window:
                    continue
                acc = per_seed.setdefault((row, frac), {m: [] for m in METRICS_A})
                errs = {m: [] for m in METRICS_A if m != "bpb"}
                for li, (q, k, v) in enumerate(layers):
                    w = press.window
                    keep = press.keep_mask(
                        q[:, :, context - w : context],
                        k[:, :, :context],
                        v[:, :, :context],
                        layer_idx=li,
                    )
                    qd = q[:, :, context:]
                    errs["decode"].append(attention_output_error(qd, k, v, keep).mean())
                    errs["decode_none"].append(
                        attention_output_error(qd, k, v, keep, normalize="none").mean()
                    )
                    o_proj = model.model.layers[li].self_attn.o_proj
                    errs["decode_oproj"].append(
                        attention_output_error(qd, k, v, keep, o_proj=o_proj).mean()
                    )
                    # window queries (the last 32 prompt queries, AnDPro's own objective)
                    qw = q[:, :, context - 32 : context]
                    kc, vc = k[:, :, :context], v[:, :, :context]
                    errs["window"].append(attention_output_error(qw, kc, vc, keep).mean())
                    errs["window_none"].append(
                        attention_output_error(qw, kc, vc, keep, normalize="none").mean()
                    )
                for key, vals in errs.items():
                    acc[key].append(float(torch.stack(vals).mean()))
                acc["bpb"].append(continuation_bpb(model, ids, context, press))

    stats = {key: {m: bootstrap_ci(v) for m, v in d.items()} for key, d in per_seed.items()}
    full_bpb = bootstrap_ci(bpb_full)
    ctx.log(f"full-cache continuation bpb {full_bpb[0]:.4f} [{full_bpb[1]:.4f}, {full_bpb[2]:.4f}]")
    for frac in budgets:
        tokens = int(frac * context)
        for row in ROWS_A:
            if (row, frac) not in stats:
                continue
            st = stats[(row, frac)]
            base = stats[("attention", frac)]
            for metric in METRICS_A:
                unit = "bits/byte" if metric == "bpb" else "rel err"
                m, lo, hi = st[metric]
                ctx.record(
                    f"{metric}/{row}",
                    m,
                    unit,
                    baseline="attention-only ablation",
                    baseline_value=base[metric][0],
                    budget=f"{int(100 * frac)}%={tokens}",
                    ci95=f"[{lo:.4g},{hi:.4g}]",
                )
        # paired comparisons per held-out window: AnDPro minus its ablation / SnapKV (negative = AnDPro better)
        for other in ("attention", "snapkv_w32_max7"):
            for metric in METRICS_A:
                a = np.array(per_seed[("andpro", frac)][metric])
                b = np.array(per_seed[(other, frac)][metric])
                diff = bootstrap_ci(a - b)
                ctx.record(
                    f"paired_diff/{metric}/andpro-{other}",
                    diff[0],
                    "bits/byte" if metric == "bpb" else "rel err",
                    budget=f"{int(100 * frac)}%={tokens}",
                    ci95=f"[{diff[1]:.4g},{diff[2]:.4g}]",
                    andpro_better=f"{int((a < b).sum())}/{len(a)}",
                )
    _summary_table(ctx, budgets, context, stats, full_bpb, len(seeds))
    rows_plot = ["andpro", "attention", "snapkv_w32_max7", "knorm", "streaming_llm", "random"]
    _plot(
        ctx,
        budgets,
        stats,
        rows_plot,
        "decode",
        "quality_a_decode_error.png",
        "relative attention-output error",
        f"decode queries (next {n_dec}), L={context}, {len(seeds)} windows, 95% CI",
    )
    _plot(
        ctx,
        budgets,
        stats,
        rows_plot,
        "window",
        "quality_a_window_error.png",
        "relative attention-output error",
        f"window queries (last 32), L={context}",
    )
    _plot(
        ctx,
        budgets,
        stats,
        rows_plot,
        "bpb",
        "quality_a_bpb.png",
        "continuation bits/byte",
        f"bits/byte of the next {n_dec - 1} bytes (full cache {full_bpb[0]:.3f})",
    )
    ctx.record(
        "bpb/full_cache", full_bpb[0], "bits/byte", ci95=f"[{full_bpb[1]:.4g},{full_bpb[2]:.4g}]"
    )


#: Quality B rows (baseline first) and their labels.
ROWS_B = {
    "attention": "attention-only ablation",
    "andpro": "AnDPro",
    "snapkv_w32_max7": "SnapKV (max-pool 7, no sinks)",
    "streaming_llm": "StreamingLLM (4 sinks + recent)",
    "random": "random (4 sinks + window kept)",
}
#: Quality B observation window: 2 % of a 512-token context is 10 tokens, so the window (which
#: holds the question when question-aware) is 4 tokens, for every row alike.
WINDOW_B = 4


@SUITE.case("retrieval", kind="quality")
def retrieval(ctx: Context) -> None:
    """Quality B: MQAR accuracy vs budget, five scorers, question-aware and -agnostic."""
    with single_thread(), torch.no_grad():
        _retrieval(ctx)


def _retrieval(ctx: Context) -> None:
    from andpro.retrieval import (
        RECIPES,
        retrieval_correct_many,
        trained_retrieval_model,
    )

    recipe = RECIPES[ctx.mode]
    model, task, meta = trained_retrieval_model(recipe)
    ctx.log(f"retrieval model: {meta}")
    n = ctx.pick(smoke=16, quick=256, full=1024)
    batch = ctx.pick(smoke=16, quick=64, full=64)
    fractions = ctx.pick(
        smoke=(0.2, 0.4), quick=(0.02, 0.05, 0.1, 0.2, 0.4), full=(0.02, 0.05, 0.1, 0.2, 0.4)
    )
    budgets = [int(f * task.context) for f in fractions]
    g = torch.Generator().manual_seed(4242)
    contexts, queries, answers = task.eval_batch(n, g)
    presses = {"full": None} | {
        (row, b): make_press(row, b, window=WINDOW_B) for row in ROWS_B for b in budgets
    }
    lines = [
        f"Quality B: MQAR, L={task.context}, {task.n_items} items, {n} held-out contexts "
        f"(one query each), window {WINDOW_B}; accuracy [95 % bootstrap CI over contexts].\n"
    ]
    for aware in (True, False):
        tag = "aware" if aware else "agnostic"
        correct: dict = {k: [] for k in presses}
        for i in progress_bar(range(0, n, batch), desc=f"andpro quality B ({tag})", leave=False):
            sl = slice(i, i + batch)
            res = retrieval_correct_many(
                model, contexts[sl], queries[sl], answers[sl], presses, aware
            )
            for k, v in res.items():
                correct[k].append(v.float())
        acc = {k: torch.cat(v).numpy() for k, v in correct.items()}
        full = bootstrap_ci(acc["full"])
        ctx.record(
            f"accuracy/{tag}/full_cache",
            full[0],
            "acc",
            lower_is_better=False,
            n=n,
            ci95=f"[{full[1]:.3f},{full[2]:.3f}]",
        )
        stats = {k: bootstrap_ci(v) for k, v in acc.items() if k != "full"}
        for row in ROWS_B:
            for b in budgets:
                m, lo, hi = stats[(row, b)]
                base = None if row == "attention" else stats[("attention", b)][0]
                ctx.record(
                    f"accuracy/{tag}/{row}",
                    m,
                    "acc",
                    baseline="attention-only ablation" if base is not None else None,
                    baseline_value=base,
                    lower_is_better=False,
                    budget=f"{round(100 * b / task.context)}%={b}",
                    n=n,
                    ci95=f"[{lo:.3f},{hi:.3f}]",
                )
        for b in budgets:
            diff = bootstrap_ci(acc[("andpro", b)] - acc[("attention", b)])
            ctx.record(
                f"paired_diff/{tag}/andpro-attention",
                diff[0],
                "acc",
                lower_is_better=False,
                budget=f"{round(100 * b / task.context)}%={b}",
                ci95=f"[{diff[1]:.3f},{diff[2]:.3f}]",
            )
        head = " | ".join(f"{round(100 * b / task.context)} % ({b})" for b in budgets)
        lines += [
            f"\n### question-{tag} (full cache {full[0]:.3f} [{full[1]:.3f}, {full[2]:.3f}])\n",
            f"| scorer | {head} |",
            "|---|" + "---:|" * len(budgets),
        ]
        for row, label in ROWS_B.items():
            cells = [
                f"{stats[(row, b)][0]:.3f} [{stats[(row, b)][1]:.3f}, {stats[(row, b)][2]:.3f}]"
                for b in budgets
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        x = [100 * b / task.context for b in budgets]
        plot_lines(
            x,
            {ROWS_B[r]: [stats[(r, b)][0] for b in budgets] for r in ROWS_B}
            | {"full cache": [full[0]] * len(budgets)},
            ctx.path(f"quality_b_{tag}.png"),
            xlabel="budget (% of the context, tokens per KV head)",
            ylabel="answer accuracy",
            title=f"MQAR, question-{tag}, L={task.context}, n={n}, 95% CI",
            logx=True,
            errors={
                ROWS_B[r]: [(stats[(r, b)][2] - stats[(r, b)][1]) / 2 for b in budgets]
                for r in ROWS_B
            },
        )
    ctx.path("quality_b_table.md").write_text("\n".join(lines) + "\n")
    for tag, acc in meta["full_cache_accuracy"].items():
        ctx.record(
            f"retrieval_model/full_cache_accuracy_at_training/{tag}",
            acc,
            "acc",
            lower_is_better=False,
            steps="+".join(str(kw["steps"]) for _t, kw in recipe),
            train_seconds=round(meta["seconds"], 1),
            cached=meta["cached"],
            n=meta["eval_n"],
        )


@SUITE.case("overhead", kind="speed")
def overhead(ctx: Context) -> None:
    """Speed: AnDPro and SnapKV scoring + selection per layer vs that layer's causal prefill attention."""
    with single_thread():
        _overhead(ctx)


def _overhead(ctx: Context) -> None:
    torch.manual_seed(0)
    hq, hkv, d = 8, 2, 64
    for length in ctx.pick(smoke=(256,), quick=(1024, 4096), full=(1024, 4096, 16384)):
        _overhead_at(ctx, length, hq, hkv, d)


def _overhead_at(ctx: Context, length: int, hq: int, hkv: int, d: int) -> None:
    q = torch.randn(1, hq, length, d)
    k = torch.randn(1, hkv, length, d)
    v = torch.randn(1, hkv, length, d)
    qw = q[:, :, -32:]
    andpro = make_press("andpro", 0.2)
    snap = make_press("snapkv_w32_max7", 0.2)
    kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
    cmp = compare(
        {
            "snapkv score+select": lambda: snap.keep_mask(qw, k, v),
            "andpro score+select": lambda: andpro.keep_mask(qw, k, v),
            "causal SDPA prefill attention": lambda: (
                torch.nn.functional.scaled_dot_product_attention(q, kr, vr, is_causal=True)
            ),
        },
        baseline="snapkv score+select",
        min_time=ctx.pick(smoke=0.05, quick=0.3, full=0.5),
        min_rounds=ctx.pick(smoke=3, quick=5, full=9),
    )
    ctx.log(str(cmp))
    cmp.record(ctx, "score_select_time", L=length, H_q=hq, H_kv=hkv, d=d, budget="20%")
    pre = cmp["causal SDPA prefill attention"].median
    ctx.record(
        "score_select/andpro_vs_prefill",
        cmp["andpro score+select"].median,
        "s",
        baseline="causal SDPA prefill attention",
        baseline_value=pre,
        L=length,
        overhead=f"{100 * cmp['andpro score+select'].median / pre:.1f}%",
    )


@SUITE.case("prefill_decode", kind="speed")
def prefill_decode(ctx: Context) -> None:
    """Speed: model prefill with vs without the press, a decode step and cache bytes after compression."""
    with single_thread(), torch.no_grad():
        _prefill_decode(ctx)


def _undo_decode_step(cache) -> None:
    """Drop the last appended token of every layer (a DynamicCache or a PressCache)."""
    from andpro.cache import PressCache

    if not isinstance(cache, PressCache):
        cache.crop(-1)
        return
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[..., :-1, :], layer.values[..., :-1, :]
        layer.positions, layer.valid = layer.positions[..., :-1], layer.valid[..., :-1]
        layer.logical_length -= 1


def _prefill_decode(ctx: Context) -> None:
    from transformers import DynamicCache

    from neurips25_core.models import tiny_llama, tiny_llama_config

    torch.manual_seed(0)
    length = ctx.pick(smoke=128, quick=1024, full=4096)
    config = tiny_llama_config(
        num_kv_heads=2, max_position_embeddings=length + 64, attn_implementation="sdpa"
    )
    model = tiny_llama(config).eval()
    ids = torch.randint(0, 256, (1, length))
    nxt = torch.randint(0, 256, (1, 1))
    frac = ctx.pick(smoke=0.5, quick=0.2, full=0.2)  # smoke: 20 % of 128 is below the 36 protected
    press = make_press("andpro", frac)

    def plain():
        cache = DynamicCache(config=model.config)
        model(ids, cache=cache)
        return cache

    def pressed():
        with press(model):
            return model(ids).cache

    kw = dict(min_time=ctx.pick(smoke=0.05, quick=0.3, full=1.0), min_rounds=ctx.pick(3, 5, 7))
    cmp = compare(
        {"prefill without press": plain, "prefill with press": pressed},
        baseline="prefill without press",
        **kw,
    )
    ctx.log(str(cmp))
    cmp.record(ctx, "prefill_time", L=length, budget=f"{round(100 * frac)}%")

    full_cache = plain()
    pos = torch.tensor([[length]])
    with press(model):
        press_cache = model(ids).cache
    mem = press_cache.memory()

    def step_full():
        model(nxt, cache=full_cache, position_ids=pos)
        _undo_decode_step(full_cache)

    def step_press():
        # The press context is entered per step (hooks registered and removed: a cost counted
        # against the press), since the full-cache step must run outside it.
        with press(model):
            press_cache.active = True
            model(nxt, cache=press_cache, position_ids=pos)
            _undo_decode_step(press_cache)

    cmp = compare(
        {"decode step, full cache": step_full, "decode step, press cache": step_press},
        baseline="decode step, full cache",
        **kw,
    )
    ctx.log(str(cmp))
    cmp.record(ctx, "decode_step_time", L=length, budget=f"{round(100 * frac)}%")
    full_bytes = sum(
        layer.keys.numel() * layer.keys.element_size() * 2 for layer in full_cache.layers
    )
    ctx.record(
        "cache_bytes/with_press",
        mem["bytes"],
        "B",
        baseline="full cache",
        baseline_value=full_bytes,
        L=length,
        budget=f"{round(100 * frac)}%",
        padded_over_kept=round(mem["physical_slots"] / mem["kept_slots"], 3),
    )
