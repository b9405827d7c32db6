"""The andpro benchmark suite (``neurips25 bench andpro``).

- ``attention_error`` (quality A): on the core's cached tiny Llama (stdlib bytes), the relative
  error of every layer's attention output after eviction, on the next 64 decoding queries and on
  the window queries, and the continuation's bits per byte with the press on; all scorers, budgets
  10/20/40 % (quick) of the context, several held-out windows (seeds), bootstrap 95 % CIs.
- ``retrieval`` (quality B): answer accuracy on synthetic key-value retrieval with a tiny Llama
  trained here, question-aware and question-agnostic.
- ``overhead`` (speed): scoring + selection time per layer vs that layer's prefill, on CPU.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

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
from neurips25_core.bench import Context, Suite, plot_lines, time_fn

SUITE = Suite(
    name="andpro",
    paper="Accurate KV Cache Eviction via Anchor Direction Projection for Efficient LLM Inference",
    url="https://openreview.net/forum?id=Tdl89SZItB",
)

RESULTS = Path(__file__).resolve().parents[2] / "results"


def make_press(row: str, budget, seed: int = 0) -> Press:
    """The press for one benchmark row (AnDPro defaults: w=32, max-pool 7, chunks of 4, adaptive)."""
    official = dict(window=32, pool_kernel=7, chunk_size=4, sink_tokens=4)
    token = dict(window=32, pool_kernel=7, chunk_size=1, sink_tokens=4)
    rows = {
        "andpro": (AnDProScorer(), official, "adaptive"),
        "attention": (AttentionScorer(), official, "adaptive"),
        "andpro_uniform": (AnDProScorer(), official, "uniform"),
        "attention_uniform": (AttentionScorer(), official, "uniform"),
        "snapkv_w32_max7": (SnapKVScorer(pooling="max"), token, "uniform"),
        "snapkv_kvpress": (
            SnapKVScorer(),
            dict(window=64, pool_kernel=5, chunk_size=1, sink_tokens=4),
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


def long_context_llama(
    seq_len: int = 576, steps: int = 200, batch_size: int = 4, lr: float = 1e-3, progress=True
):
    """The core's cached tiny Llama (trained at 128 bytes), fine-tuned at ``seq_len`` bytes.

    The core model degrades past its 128-byte training context (bits/byte 2.2 at positions < 128,
    3.4 at 320-576), so quality A would measure eviction on a broken model. A short fine-tune at
    ``seq_len`` fixes that; it is cached beside the core's checkpoints.
    """
    import fcntl
    import json

    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import cache_dir, evaluate_bpb, pretrained_tiny_llama, train

    model = pretrained_tiny_llama(progress=progress)
    corpus = stdlib_corpus()
    key = f"andpro_longctx-{model.neurips25_meta['key']}-{seq_len}-{steps}-{batch_size}-{lr}"
    root = cache_dir()
    weights, meta_path = root / f"{key}.pt", root / f"{key}.json"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent callers wait instead of training twice
        if weights.exists() and meta_path.exists():
            model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            meta = json.loads(meta_path.read_text())
        else:
            res = train(
                model,
                corpus,
                steps,
                lr=lr,
                batch_size=batch_size,
                seq_len=seq_len,
                warmup=steps // 10,
                progress=progress,
                desc="andpro: fine-tune tiny llama at long context",
            )
            meta = {
                "key": key,
                "seconds": res.seconds,
                "final_loss": sum(res.losses[-20:]) / 20,
                "val_bpb": evaluate_bpb(model, corpus, seq_len=seq_len, num_batches=8),
            }
            torch.save(model.state_dict(), weights)
            meta_path.write_text(json.dumps(meta, indent=2))
    model.eval()
    model.neurips25_meta = meta
    return model


@contextlib.contextmanager
def single_thread():
    """Quality cases run many small ops: one intra-op thread avoids OpenMP spin-waits on a shared CPU."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


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
    model = long_context_llama()
    ctx.log(f"model: core tiny Llama fine-tuned at 576 bytes, {model.neurips25_meta}")
    corpus = stdlib_corpus()
    context = 512
    n_dec = 64
    seeds = range(6 if ctx.quick else 24)
    budgets = (0.1, 0.2, 0.4) if ctx.quick else (0.08, 0.1, 0.2, 0.4)
    val = corpus.val
    from tqdm.auto import tqdm

    per_seed: dict[tuple[str, float], dict[str, list[float]]] = {}
    bpb_full = []
    for seed in tqdm(seeds, desc="andpro quality A", leave=False):
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


@SUITE.case("retrieval", kind="quality")
def retrieval(ctx: Context) -> None:
    """Quality B: key-value retrieval accuracy vs budget (tiny Llama trained here)."""
    with single_thread():
        _retrieval(ctx)


def _retrieval(ctx: Context) -> None:
    from andpro.retrieval import RetrievalTask, load_or_train, retrieval_accuracy

    model, info, task = load_or_train(
        RESULTS / "retrieval_model.pt", RetrievalTask(), steps=3000, progress=True
    )
    ctx.log(f"retrieval model: {info}")
    n = 256 if ctx.quick else 1024
    g = torch.Generator().manual_seed(4242)
    contexts, queries, answers = task.eval_batch(n, g)
    rows = [
        "attention",
        "andpro",
        "snapkv_w32_max7",
        "knorm",
        "streaming_llm",
        "random",
    ]  # baseline first
    budgets = (40, 48, 64, 96)
    series = {}
    for aware in (True, False):
        tag = "aware" if aware else "agnostic"
        full = retrieval_accuracy(model, contexts, queries, answers, None, aware)
        ctx.record(f"accuracy/{tag}/full_cache", full, "acc", lower_is_better=False, n=n)
        for row in rows:
            accs = []
            for budget in budgets:
                acc = float(
                    np.mean(
                        [
                            retrieval_accuracy(
                                model,
                                contexts[i : i + 64],
                                queries[i : i + 64],
                                answers[i : i + 64],
                                make_press(row, budget),
                                aware,
                            )
                            for i in range(0, n, 64)
                        ]
                    )
                )
                accs.append(acc)
                base = None
                if row != "attention":
                    base = series.get((tag, "attention"), [None] * len(budgets))[len(accs) - 1]
                ctx.record(
                    f"accuracy/{tag}/{row}",
                    acc,
                    "acc",
                    baseline="attention-only ablation" if base is not None else None,
                    baseline_value=base,
                    lower_is_better=False,
                    budget=budget,
                    n=n,
                )
            series[(tag, row)] = accs
        plot_lines(
            list(budgets),
            {r: series[(tag, r)] for r in rows} | {"full cache": [full] * len(budgets)},
            ctx.path(f"quality_b_{tag}.png"),
            xlabel="budget (tokens per KV head)",
            ylabel="answer accuracy",
            title=f"KV retrieval, question-{tag}, L={task.context}, n={n}",
        )
    ctx.record(
        "train_steps",
        info.get("steps", 0),
        "steps",
        final_loss=round(info.get("final_loss", float("nan")), 4),
    )


@SUITE.case("overhead", kind="speed")
def overhead(ctx: Context) -> None:
    """Speed: AnDPro and SnapKV scoring + selection per layer vs that layer's causal prefill attention."""
    with single_thread():
        _overhead(ctx)


def _overhead(ctx: Context) -> None:
    torch.manual_seed(0)
    hq, hkv, d = 8, 2, 64
    lengths = (1024, 4096) if ctx.quick else (1024, 4096, 16384)
    for length in lengths:
        q = torch.randn(1, hq, length, d)
        k = torch.randn(1, hkv, length, d)
        v = torch.randn(1, hkv, length, d)
        qw = q[:, :, -32:]
        andpro = make_press("andpro", 0.2)
        snap = make_press("snapkv_w32_max7", 0.2)
        t_andpro = time_fn(lambda p=andpro, a=(qw, k, v): p.keep_mask(*a), min_time=0.3)
        t_snap = time_fn(lambda p=snap, a=(qw, k, v): p.keep_mask(*a), min_time=0.3)
        kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
        t_prefill = time_fn(
            lambda a=(q, kr, vr): torch.nn.functional.scaled_dot_product_attention(
                *a, is_causal=True
            ),
            min_time=0.3,
        )
        ctx.record(
            "score_select/andpro",
            t_andpro.median,
            "s",
            baseline="snapkv score+select",
            baseline_value=t_snap.median,
            L=length,
            H_q=hq,
            H_kv=hkv,
            d=d,
        )
        ctx.record(
            "score_select/andpro_vs_prefill",
            t_andpro.median,
            "s",
            baseline="causal SDPA prefill attention",
            baseline_value=t_prefill.median,
            L=length,
            H_q=hq,
            H_kv=hkv,
            d=d,
        )


@SUITE.case("prefill_decode", kind="speed")
def prefill_decode(ctx: Context) -> None:
    """Speed: model prefill with vs without the press, a decode step and cache bytes after compression."""
    with single_thread():
        _prefill_decode(ctx)


def _prefill_decode(ctx: Context) -> None:
    from transformers import DynamicCache

    from neurips25_core.models import tiny_llama, tiny_llama_config

    torch.manual_seed(0)
    length = 1024 if ctx.quick else 4096
    config = tiny_llama_config(
        num_kv_heads=2, max_position_embeddings=length + 64, attn_implementation="sdpa"
    )
    model = tiny_llama(config).eval()
    ids = torch.randint(0, 256, (1, length))
    nxt = torch.randint(0, 256, (1, 1))
    press = make_press("andpro", 0.2)

    @torch.no_grad()
    def plain():
        cache = DynamicCache(config=model.config)
        model(ids, cache=cache)
        return cache

    @torch.no_grad()
    def pressed():
        with press(model) as cache:
            model(ids, cache=cache)

    reps = 3 if ctx.quick else 7
    t_plain = time_fn(plain, warmup=1, repeats=reps)
    t_press = time_fn(pressed, warmup=1, repeats=reps)
    ctx.record(
        "prefill/with_press",
        t_press.median,
        "s",
        baseline="prefill without press",
        baseline_value=t_plain.median,
        L=length,
        budget="20%",
    )
    full_cache = plain()
    with torch.no_grad():
        t_dec_full = _decode_step_median(model, full_cache, nxt, length)
        with press(model) as cache:
            model(ids, cache=cache)
            mem = cache.memory()
            t_dec_press = _decode_step_median(model, cache, nxt, length)
    full_bytes = sum(
        layer.keys.numel() * layer.keys.element_size() * 2 for layer in full_cache.layers
    )
    ctx.record(
        "decode_step/with_press",
        t_dec_press,
        "s",
        baseline="decode step, full cache",
        baseline_value=t_dec_full,
        L=length,
        budget="20%",
    )
    ctx.record(
        "cache_bytes/with_press",
        mem["bytes"],
        "B",
        baseline="full cache",
        baseline_value=full_bytes,
        L=length,
        budget="20%",
        padded_over_kept=round(mem["physical_slots"] / mem["kept_slots"], 3),
    )


def _decode_step_median(model, cache, token, length: int, steps: int = 16) -> float:
    """Median wall time of ``steps`` consecutive one-token decode steps on ``cache``."""
    import time

    times = []
    for t in range(steps):
        pos = torch.tensor([[length + t]])
        start = time.perf_counter()
        model(token, cache=cache, position_ids=pos)
        times.append(time.perf_counter() - start)
    return float(np.median(times))
