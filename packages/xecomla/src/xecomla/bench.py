"""The xecomla benchmark suite (``neurips25 bench xecomla``).

* ``decode_step`` (speed) — one decode token of one layer against a T-token cache: GQA (the
  teacher's ``LlamaAttention``, the baseline), MLA absorbed, MLA decompressed and the Mamba2
  ``step``, all through their real forward paths (the caches are cropped back after each call).
* ``quality`` — the reduced reproduction: students (a)–(f) distilled from a stdlib-trained Llama
  teacher, and the training-free peers (the teacher with int4 / int2 quanto and fp8 KV caches);
  bits/byte, recall, KV bytes per token (:mod:`xecomla.reproduction`).
* ``decode_model`` (speed) — whole-model decode after a T-token prefill: the GQA teacher
  (baseline) against the hybrids and the quantized-cache peers.
"""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="xecomla",
    paper="Zebra-Llama: Towards Extremely Efficient Hybrid Models",
    url="https://arxiv.org/abs/2505.17272",
)


def _teacher_config(hidden=64, heads=4, kv_heads=2, layers=8):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        intermediate_size=3 * hidden,
        vocab_size=256,
        max_position_embeddings=8192,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


@SUITE.case("decode_step", kind="speed")
def decode_step(ctx: Context) -> None:
    """Per-layer decode step at T cached tokens: GQA (baseline) vs MLA absorbed / decompressed vs Mamba2 step.

    Shapes of the issue's reduced run: d 64, 4 heads (2 KV), d_h 16; MLA r_q 48, r_kv 16, d_nope 8,
    d_rope 8, d_v 16 (24 cached numbers per token against GQA's 64). Absorbed and decompressed are
    checked equal (fp32, 1e-5) before timing; GQA and Mamba2 compute other functions.
    """
    import torch
    from transformers import DynamicCache
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    from neurips25_core.testing import assert_close
    from xecomla import MLAConfig
    from xecomla.init import mamba_from_attention, mla_from_attention

    cfg = _teacher_config()
    mla_cfg = MLAConfig(r_q=48, r_kv=16, d_nope=8, d_rope=8, d_v=16)
    lengths = ctx.pick(smoke=[64], quick=[256, 1024], full=[256, 1024, 4096])
    torch.manual_seed(0)
    gqa = LlamaAttention(cfg, layer_idx=0).eval()
    mla = mla_from_attention(gqa, mla_cfg).eval()
    mla_dec = mla_from_attention(gqa, mla_cfg).eval()
    mla_dec.absorb = False
    mamba = mamba_from_attention(gqa).eval()
    rotary = LlamaRotaryEmbedding(cfg)

    def at_length(T):
        prefill = torch.randn(1, T, cfg.hidden_size)
        x = torch.randn(1, 1, cfg.hidden_size)
        pos = torch.full((1, 1), T)
        cos_sin = rotary(x, pos)
        caches = {}
        with torch.no_grad():
            for name, layer in (("gqa", gqa), ("mla", mla), ("mla_dec", mla_dec)):
                caches[name] = DynamicCache()
                pe = rotary(prefill, torch.arange(T)[None])
                layer(prefill, pe, None, cache=caches[name], position_ids=torch.arange(T)[None])
            _, _, conv_state, ssm_state = mamba.mix(prefill)

        def one(layer, name, pe):
            def run():
                with torch.no_grad():
                    out = layer(x, pe, None, cache=caches[name], position_ids=pos)[0]
                caches[name].crop(-1)  # back to T cached tokens
                return out

            return run

        fns = {
            "gqa": one(gqa, "gqa", cos_sin),
            "mla_absorbed": one(mla, "mla", None),
            "mla_decompressed": one(mla_dec, "mla_dec", None),
            "mamba2_step": lambda: mamba.step(x[:, 0], conv_state, ssm_state)[0],
        }
        with torch.no_grad():
            assert_close(fns["mla_absorbed"](), fns["mla_decompressed"](), rtol=1e-5)
        with single_thread(), torch.no_grad():
            result = compare(
                fns, baseline="gqa", min_time=ctx.pick(smoke=0.01, quick=0.1, full=1.0)
            )
        result.record(
            ctx,
            T=T,
            cached_per_token_gqa=2
            * cfg.num_key_value_heads
            * (cfg.hidden_size // cfg.num_attention_heads),
            cached_per_token_mla=mla_cfg.cache_width,
        )

    for T in lengths:
        at_length(T)


# ----------------------------------------------------------------------------- quality

#: Reduced-reproduction sizes. ``full`` is the issue's: teacher hidden 64, 8 layers, 800 steps at
#: 16×128; ILD 200 + KL 400 steps; (c) and (d) on seeds 0, 1, 2 (``every_seed``), the other
#: students on the first seed. About 40 CPU-minutes single-threaded (measured CPU per step:
#: teacher 0.22 s, ILD all-MLA 0.27 s / all-Mamba2 0.51 s, KL 0.27-0.45 s).
#: ``quick`` is the issue's quick size at batch 8 instead of 16 (the --quick CPU budget).
#: ``smoke`` leaves quanto out: its first use compiles a C++ extension (~90 s CPU), past the
#: smoke limit in a fresh environment; tests/test_reproduction.py covers it (slow marker).
# fmt: off
QUALITY_SIZES = {
    "smoke": dict(
        hidden=32, layers=2, teacher_steps=30, batch=4, seq=64, ild=2, kl=3, seeds=(0,),
        students=("b", "c"), peers=("fp8",), val_batches=1, recall_rows=8,
        bytes_T=128, prefill=32,
    ),
    "quick": dict(
        hidden=32, layers=4, teacher_steps=200, batch=8, seq=128, ild=30, kl=60, seeds=(0,),
        students=("b", "c"), peers=("quanto2",), val_batches=2, recall_rows=32,
        bytes_T=2048, prefill=64,
    ),
    "full": dict(
        hidden=64, layers=8, teacher_steps=800, batch=16, seq=128, ild=200, kl=400,
        seeds=(0, 1, 2), students=("a", "b", "c", "d", "e", "f"), every_seed=("c", "d"),
        peers=("quanto4", "quanto2", "fp8"), val_batches=4, recall_rows=64, bytes_T=2048,
        prefill=64,
    ),
}
# fmt: on

STUDENT_NAMES = {
    "a": "(a) all-MLA (X-EcoMLA)",
    "b": "(b) MambaInLlama, GQA at even layers",
    "c": "(c) Zebra: MLA by SMART + Mamba2",
    "d": "(d) Zebra, uniform MLA placement",
    "e": "(e) Zebra from random init",
    "f": "(f) all-Mamba2",
}


def mla_config_for(hidden: int, heads: int = 4):
    """The issue's MLA ranks scaled to d_h = hidden / heads: r_q 3·d_h, r_kv d_h, d_nope = d_rope =
    d_h/2, d_v d_h (37.5 % of GQA's per-token cache with 2 KV heads)."""
    from xecomla import MLAConfig

    d_h = hidden // heads
    return MLAConfig(r_q=3 * d_h, r_kv=d_h, d_nope=d_h // 2, d_rope=d_h // 2, d_v=d_h)


@SUITE.case("quality", kind="quality")
def quality(ctx: Context) -> None:
    """The reduced reproduction (see :func:`_quality`), run single-threaded: these models are a
    few hundred thousand parameters, and on a shared two-core machine one thread is faster."""
    with single_thread():
        _quality(ctx)


def _quality(ctx: Context) -> None:
    """The reduced reproduction: students (a)–(f) distilled from a stdlib-trained Llama, and the
    training-free peers (the teacher with int4 / int2 quanto and fp8 KV caches).

    Per student: validation bits/byte, recall accuracy on key→value probes, KV bytes per token
    (bf16) and their % of the teacher's. ILD (teacher-forced, all parameters) on an all-MLA and an
    all-Mamba2 student, SMART sensitivities from them, students assembled from the ILD-trained
    mixers, then KL distillation (token mean). (e) runs the same ILD + KL from random init.
    """
    import statistics

    import torch

    import xecomla
    from neurips25_core.bench import plot_bars
    from neurips25_core.progress import progress_bar
    from xecomla import reproduction as rp

    size = QUALITY_SIZES[ctx.mode]
    teacher, corpus, tmeta = rp.trained_teacher(size, progress=not ctx.smoke)
    cfg = teacher.config
    L = cfg.num_hidden_layers
    n_mla = max(1, L // 4)
    mla_cfg = mla_config_for(size["hidden"])
    B, T = size["batch"], size["seq"]
    val = list(corpus.batches("val", B, T, seed=0, num_batches=size["val_batches"]))
    recall = rp.recall_eval(size["recall_rows"], T)
    teacher_kv = xecomla.kv_cache_bytes(teacher, 1)

    bpb, rec = rp.evaluate(teacher, val, recall)
    ctx.log(f"teacher: {bpb:.3f} bits/byte, recall {rec:.3f} ({tmeta})")
    ctx.record("bpb", bpb, "bits/byte", arm="teacher", kv_bytes_per_token=teacher_kv)
    ctx.record("recall", rec, "acc", lower_is_better=False, arm="teacher")
    table = {"teacher": ([bpb], [rec], teacher_kv)}

    # ---- peers: the trained teacher with a quantized KV cache, no training
    for kind in size["peers"]:
        why = rp.peer_available(kind)
        if why is not None:
            ctx.log(f"peer {kind} skipped: {why}")
            continue

        def factory(m, k=kind):
            return rp.peer_cache(k, m.config)

        # bits/byte: prefill `prefill` bytes, decode the rest; recall: prefill the key→value
        # table only, so every query reads it from the quantized cache
        p_bpb, p_rec = rp.evaluate(
            teacher,
            val,
            recall,
            logits_fn=rp.cached_logits(factory, size["prefill"]),
            recall_logits_fn=rp.cached_logits(factory, rp.TABLE_BYTES),
        )
        # bytes at bytes_T tokens with quanto's residual window half full (its mean over decode)
        cache = rp.peer_cache(kind, cfg)
        ids = torch.randint(0, 256, (1, size["bytes_T"]))
        half = 64 if kind.startswith("quanto") else 0
        with torch.no_grad():
            teacher(input_ids=ids[:, : ids.shape[1] - half], cache=cache, use_cache=True)
            for t in range(ids.shape[1] - half, ids.shape[1]):
                teacher(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True)
        qbytes, rbytes = rp.quantized_cache_bytes(cache)
        per_token = (qbytes + rbytes) / size["bytes_T"]
        arm = f"teacher+{kind}"
        ctx.record(
            "bpb", p_bpb, "bits/byte", baseline="teacher", baseline_value=bpb, arm=arm,
            kv_bytes_per_token=per_token, kv_pct=100 * per_token / teacher_kv,
            residual_bytes=rbytes, quantized_bytes=qbytes, bytes_at_T=size["bytes_T"],
            prefill=size["prefill"],
        )  # fmt: skip
        ctx.record("recall", p_rec, "acc", lower_is_better=False, arm=arm)
        table[arm] = ([p_bpb], [p_rec], per_token)
        ctx.log(f"{arm}: {p_bpb:.3f} bits/byte, recall {p_rec:.3f}, {per_token:.1f} B/token")

    # ---- students
    results: dict[str, list[tuple[float, float]]] = {s: [] for s in size["students"]}
    kv_of: dict[str, float] = {}
    placements = []
    every_seed = size.get("every_seed")

    def students_of(seed):
        if every_seed is None or seed == size["seeds"][0]:
            return size["students"]
        return tuple(s for s in size["students"] if s in every_seed)

    stages = sum(2 + ("e" in students_of(x)) + len(students_of(x)) for x in size["seeds"])
    with progress_bar(total=stages, desc="xecomla students", leave=False) as bar:

        def tick():
            if bar is not None:
                bar.update(1)

        for seed in size["seeds"]:
            ild_data = rp.distill_batches(corpus, size["ild"], B, T, seed=1000 + seed)
            kl_data = rp.distill_batches(corpus, size["kl"], B, T, seed=2000 + seed)
            torch.manual_seed(seed)
            mla_all = xecomla.compose(teacher, mla_layers=list(range(L)), mla_config=mla_cfg)
            xecomla.ild(mla_all, teacher, ild_data, steps=size["ild"], lr=2e-3)
            tick()
            mamba_all = xecomla.compose(teacher, mla_layers=[], mla_config=None)
            xecomla.ild(mamba_all, teacher, ild_data, steps=size["ild"], lr=2e-3)
            tick()
            calib = ild_data[: max(1, min(4, len(ild_data)))]
            sens = xecomla.layer_sensitivity(mla_all, mamba_all, teacher, calib)
            smart = xecomla.smart_select(sens, n_mla)
            uniform = xecomla.uniform_select(L, n_mla)
            placements.append({"seed": seed, "sensitivity": sens, "smart": smart})
            ctx.log(f"seed {seed}: sensitivity {[round(s, 4) for s in sens]} -> SMART {smart}")

            def kinds(mla=(), gqa=()):
                return ["mla" if i in mla else "gqa" if i in gqa else "mamba2" for i in range(L)]

            layouts = {
                "a": kinds(mla=range(L)),
                "b": kinds(gqa=range(0, L, 2)),
                "c": kinds(mla=smart),
                "d": kinds(mla=uniform),
                "f": kinds(),
            }
            for s in students_of(seed):
                if s == "e":
                    torch.manual_seed(seed)
                    student = xecomla.compose(
                        teacher, mla_layers=smart, mla_config=mla_cfg, mla_init="random",
                        mamba_init="random",
                    )  # fmt: skip
                    xecomla.ild(student, teacher, ild_data, steps=size["ild"], lr=2e-3)
                    tick()
                else:
                    student = rp.assemble(teacher, layouts[s], mla_all, mamba_all)
                ild_bpb, _ = rp.evaluate(student, val[:1], (recall[0][:1], recall[1][:1]))
                xecomla.distill(student, teacher, kl_data, steps=size["kl"], lr=1e-3)
                tick()
                s_bpb, s_rec = rp.evaluate(student, val, recall)
                kv_of[s] = xecomla.kv_cache_bytes(student, 1)
                results[s].append((s_bpb, s_rec))
                layers = [i for i, k in enumerate(student.hybrid_layout.kinds) if k != "mamba2"]
                ctx.record(
                    "bpb", s_bpb, "bits/byte", baseline="teacher", baseline_value=bpb,
                    arm=STUDENT_NAMES[s], student=s, seed=seed, kv_bytes_per_token=kv_of[s],
                    kv_pct=100 * kv_of[s] / teacher_kv, attention_layers=layers,
                    bpb_after_ild_1batch=ild_bpb,
                )  # fmt: skip
                ctx.record(
                    "recall", s_rec, "acc", lower_is_better=False, arm=STUDENT_NAMES[s],
                    student=s, seed=seed,
                )  # fmt: skip
                ctx.log(
                    f"{STUDENT_NAMES[s]} seed {seed}: {s_bpb:.3f} bits/byte, recall {s_rec:.3f}"
                )
                del student

    def mean_sd(xs):
        return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)

    for s, runs in results.items():
        m, sd = mean_sd([r[0] for r in runs])
        rm, rsd = mean_sd([r[1] for r in runs])
        ctx.record(
            "bpb_mean", m, "bits/byte", arm=STUDENT_NAMES[s], student=s, sd=sd, seeds=len(runs),
            recall_mean=rm, recall_sd=rsd, kv_pct=100 * kv_of[s] / teacher_kv,
        )  # fmt: skip
        table[STUDENT_NAMES[s]] = ([r[0] for r in runs], [r[1] for r in runs], kv_of[s])
    if "c" in results and "e" in results:
        ctx.record(
            "init_minus_random_bpb",
            mean_sd([r[0] for r in results["c"]])[0] - mean_sd([r[0] for r in results["e"]])[0],
            "bits/byte", note="(c) SVD/attention init minus (e) random init; < 0: init helps",
        )  # fmt: skip
    if "c" in results and "d" in results:
        ctx.record(
            "smart_minus_uniform_bpb",
            mean_sd([r[0] for r in results["c"]])[0] - mean_sd([r[0] for r in results["d"]])[0],
            "bits/byte", note="(c) SMART minus (d) uniform; compare with the seed sd",
            placements=placements,
        )  # fmt: skip

    names = list(table)
    plot_bars(
        names,
        {"bits/byte": [statistics.mean(table[n][0]) for n in names]},
        ctx.path("quality_bpb.png"),
        ylabel="validation bits/byte (lower is better)",
        title=f"students vs teacher ({ctx.mode}; mean over seeds)",
    )
    plot_bars(
        names,
        {
            "recall acc": [statistics.mean(table[n][1]) for n in names],
            "KV % of teacher / 100": [table[n][2] / teacher_kv for n in names],
        },
        ctx.path("quality_recall_kv.png"),
        ylabel="fraction",
        title="recall accuracy and KV bytes per token (teacher = 1)",
    )


# ----------------------------------------------------------------------------- whole-model decode


@SUITE.case("decode_model", kind="speed")
def decode_model(ctx: Context) -> None:
    """One decode token of the whole model (batch 1) after a T-token prefill, against the teacher.

    Shapes of the reduced run's full teacher (hidden 64, 8 layers, 4 heads, 2 KV; random weights:
    speed does not depend on training). Arms: the GQA teacher with transformers' ``DynamicCache``
    (baseline); (a) all-MLA, (b) MambaInLlama (GQA at even layers), (c) Zebra (MLA at [0, 4] +
    6 Mamba2) with :func:`xecomla.hybrid_cache`; the peers, the teacher with
    ``QuantizedCache(backend="quanto", nbits=2)`` and ``backend="fp8"``. Attention caches are
    cropped back to T after each call; quanto's layers cannot be cropped, so its cache grows by one
    token per call (a residual-window flush every 128 calls is part of its cost).
    """
    import torch
    from transformers import DynamicCache, LlamaForCausalLM
    from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

    import xecomla
    from neurips25_core.testing import assert_close
    from xecomla import reproduction as rp

    lengths = ctx.pick(smoke=[64], quick=[1024], full=[1024, 2048, 4096])
    cfg = rp.teacher_config(64, ctx.pick(smoke=2, quick=8, full=8))
    L = cfg.num_hidden_layers
    torch.manual_seed(0)
    teacher = LlamaForCausalLM(cfg).eval()
    mla_cfg = mla_config_for(64)
    models = {
        "gqa_teacher": teacher,
        "all_mla": xecomla.compose(teacher, mla_layers=list(range(L)), mla_config=mla_cfg),
        "mambainllama": xecomla.compose(
            teacher, mla_layers=[], mla_config=None, gqa_layers=list(range(0, L, 2))
        ),
        "zebra": xecomla.compose(
            teacher, mla_layers=xecomla.uniform_select(L, max(1, L // 4)), mla_config=mla_cfg
        ),
    }
    peers = [k for k in ("quanto2", "fp8") if rp.peer_available(k) is None]
    for k in ("quanto2", "fp8"):
        if k not in peers:
            ctx.log(f"decode_model: peer {k} skipped: {rp.peer_available(k)}")

    def cache_for(name):
        if name.startswith("teacher+"):
            return rp.peer_cache(name.split("+")[1], cfg)
        return DynamicCache() if name == "gqa_teacher" else xecomla.hybrid_cache(models[name])

    for T in lengths:
        g = torch.Generator().manual_seed(T)
        prefill = torch.randint(0, 256, (1, T), generator=g)
        nxt = torch.randint(0, 256, (1, 1), generator=g)
        fns = {}
        for name in list(models) + [f"teacher+{k}" for k in peers]:
            model = models.get(name, teacher)
            cache = cache_for(name)
            with torch.no_grad():
                model(input_ids=prefill, cache=cache, use_cache=True)

            def step(model=model, cache=cache, nxt=nxt):
                with torch.no_grad():
                    out = model(input_ids=nxt, cache=cache, use_cache=True).logits
                for layer in cache.layers:
                    if (
                        isinstance(layer, DynamicLayer)
                        and not isinstance(layer, LinearAttentionLayer)
                        and getattr(layer, "is_croppable", True)
                    ):
                        layer.crop(-1)  # back to T cached tokens
                return out

            fns[name] = step
        with torch.no_grad():  # the cached decode of the baseline is its full forward
            full = teacher(input_ids=torch.cat([prefill, nxt], 1)).logits[:, -1:]
            assert_close(fns["gqa_teacher"](), full, rtol=1e-4)
        with single_thread():
            result = compare(
                fns, baseline="gqa_teacher", min_time=ctx.pick(smoke=0.01, quick=0.15, full=1.0)
            )
        result.record(
            ctx,
            T=T,
            kv_bytes_gqa=xecomla.kv_cache_bytes(teacher, T),
            kv_bytes_zebra=xecomla.kv_cache_bytes(models["zebra"], T),
        )
