"""The qpalette benchmark suite (``neurips25 bench qpalette``).

Quality (the reduced reproduction): a tiny Llama (hidden 128, intermediate 512, 4 layers, 4 heads,
2 KV heads, byte vocabulary) trained on ``stdlib_corpus()`` and cached; all 28 projections
quantized at each budget b̄ by RTN-g128 (ours, bit-identical to torchao's ``IntxWeightOnlyConfig``
symmetric), torchao RTN / NF4 (peers extra), NF (absmax-64), HIGGS-like (rotation + Lloyd-Max
NUQ), single-scheme TCQ, integer-only MSQ (NUQ 2/3/4), memory MSQ and latency MSQ (proxy cost
5 µs + bytes / 1 TB/s, budget = single-scheme TCQ unfused, plus the memory budget b̄). Held-out bits/byte, stored bits/weight (codes + codebooks, and all-in with
row scales, group scales and sign vectors), and the linearity-theorem prediction Σ a_l·e_l
against the measured KL to the FP model.

* smoke: 1-layer width-32 toy model, L = 6 (L = 4 cannot reach 2 bits: KV < L), b̄ = 2.
* quick: a smaller Llama (hidden 64, intermediate 256, 2 layers, 4 heads, 2 KV heads: 14
  projections) trained 200 steps, so that the whole suite fits in well under a minute of CPU on
  an empty cache; b̄ ∈ {2, 3}, L = 8 (TCQ <= 3.5 bits at L = 8), the issue's quick arms only:
  RTN-g128 (ours and torchao), single-scheme TCQ and memory MSQ, plus torchao NF4 once as a
  4-bit reference point (asymmetric RTN, NF, HIGGS-like, integer MSQ and latency MSQ are the
  full run's).
* full: 600 training steps, b̄ ∈ {2, 2.5, 3, 3.5, 4}, L = 10 (about 0.7 dB worse than the
  official L = 16), every method.

Speed (CPU, one thread): dequantize + matmul against the fp32 matmul (random codes: any word
stream is a valid tail-biting TCQ code), Viterbi encode time against L, and the GEMV byte model.
"""

from __future__ import annotations

import json
import math

import torch

from neurips25_core.bench import Context, Suite, compare, plot_lines, single_thread, time_fn

SUITE = Suite(
    name="qpalette",
    paper="Q-Palette: Fractional-Bit Quantizers Toward Optimal Bit Allocation for Efficient LLM "
    "Deployment",
    url="https://arxiv.org/abs/2509.20214",
)

LLAMA = dict(hidden_size=128, intermediate_size=512, num_layers=4, num_heads=4, num_kv_heads=2)
SMOKE = dict(hidden_size=32, intermediate_size=96, num_layers=1, num_heads=2, num_kv_heads=1)
#: --quick's model: the issue's 4-layer hidden-128 Llama trained 300 steps took minutes on the
#: shared two cores (538 s for the suite on an empty cache), so quick uses this one.
QUICK = dict(hidden_size=64, intermediate_size=256, num_layers=2, num_heads=4, num_kv_heads=2)
QUICK_STEPS = 200


def _model(ctx: Context):
    from neurips25_core.models import pretrained_tiny_llama, tiny_llama_config

    if ctx.smoke:
        cfg = tiny_llama_config(**SMOKE)
        return pretrained_tiny_llama(cfg, steps=30, batch_size=4, seq_len=64, progress=False)
    cfg = ctx.pick(smoke=SMOKE, quick=QUICK, full=LLAMA)
    steps = ctx.pick(smoke=30, quick=QUICK_STEPS, full=600)
    return pretrained_tiny_llama(tiny_llama_config(**cfg), steps=steps, seq_len=128)


def _fake_quant(model, fn):
    """Replace every projection's weight by fn(name, weight) -> (dequantized, stored bits)."""
    from .integration import llama_projections

    mods = dict(model.named_modules())
    total_bits = 0.0
    n = 0
    with torch.no_grad():
        for name in llama_projections(model):
            w = mods[name].weight
            d, bits = fn(name, w.detach())
            w.copy_(d)
            total_bits += bits * w.numel()
            n += w.numel()
    return total_bits / n


def _stored_bits(model, names) -> tuple[float, float]:
    """(codes + codebooks, all-in incl. row scales and signs) bits per weight of a quantized model."""
    from .modules import FusedMember, QPaletteLinear
    from .quantizers import storage_bytes

    mods = dict(model.named_modules())
    core = allin = 0.0
    n = 0
    seen_signs, codebooks = set(), {}
    for name in names:
        m = mods[name]
        if isinstance(m, FusedMember):
            m = m.group.members[m.index]
        assert isinstance(m, QPaletteLinear) and m.qweight is not None
        qm = m.qweight
        core += 8 * storage_bytes(qm.spec, qm.shape, codebook=False)
        allin += 8 * (storage_bytes(qm.spec, qm.shape, codebook=False) + 2 * qm.shape[0])
        codebooks[(qm.spec.kind, tuple(qm.codebook.shape))] = 16 * qm.codebook.numel()
        key = m.signs.data_ptr()
        if key not in seen_signs:  # one sign vector per same-input family
            seen_signs.add(key)
            allin += m.in_features
        n += qm.shape[0] * qm.shape[1]
    allin += sum(codebooks.values())  # each distinct codebook stored once
    return core / n, allin / n


@SUITE.case("quality", kind="quality")
def quality(ctx: Context) -> None:
    """Bits/byte of every method at each budget on the cached tiny Llama (every projection).

    Runs on one thread: on the shared 2-core machine, two threads made training ~15x slower.
    """
    with single_thread():
        _quality(ctx)


def _quality(ctx: Context) -> None:
    import copy

    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb

    from .allocation import (
        estimate_sensitivities,
        gaussian_error_table,
        model_kl,
        proxy_latency,
        solve_latency_msq,
        solve_memory_msq,
    )
    from .baselines import (
        TORCHAO_MISSING,
        nf_quantize,
        rtn_quantize,
        torchao_available,
        torchao_nf4,
        torchao_rtn,
    )
    from .integration import families, llama_blocks, llama_projections, quantize_llama
    from .quantizers import QuantizerSpec, parse_spec

    corpus = stdlib_corpus()
    base = _model(ctx)
    L = ctx.pick(smoke=6, quick=8, full=10)
    budgets = ctx.pick(smoke=[2.0], quick=[2.0, 3.0], full=[2.0, 2.5, 3.0, 3.5, 4.0])
    nb = ctx.pick(smoke=2, quick=12, full=40)  # held-out windows (the same for every arm)
    seq = ctx.pick(smoke=64, quick=128, full=128)

    def bpb(m):
        return evaluate_bpb(m, corpus, seq_len=seq, num_batches=nb)

    fp_bpb = bpb(base)
    c = base.config
    model_info = {
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_layers": c.num_hidden_layers,
        "train_steps": base.neurips25_meta.get("steps"),
    }
    ctx.log(f"model {model_info}, fp32 bits/byte {fp_bpb:.4f}")
    names = llama_projections(base)
    mods = dict(base.named_modules())
    shapes = {n: tuple(mods[n].weight.shape) for n in names}
    g = torch.Generator().manual_seed(123)
    tokens = torch.randint(0, base.config.vocab_size, (4, seq), generator=g)
    with torch.no_grad():
        ref_logits = base(tokens).logits
    sens = estimate_sensitivities(base, names, tokens=tokens, t=0.01)

    tcq = [QuantizerSpec("tcq", b / 4, L=L) for b in range(6, 21) if math.ceil(b / 2) < L]
    palette = tcq + [parse_spec(f"nuq-{b}") for b in (2, 3, 4)]
    vq_top = ctx.pick(smoke=6, quick=8, full=8)  # smoke (b̄ = 2): VQ up to 3 bits
    palette += [parse_spec(f"vq-{b / 2:g}") for b in range(3, vq_top + 1)]
    table = gaussian_error_table(palette, rows=ctx.pick(smoke=16, quick=64, full=256))
    int_palette = [parse_spec(f"nuq-{b}") for b in (2, 3, 4)]
    ctx.log("error table: " + ", ".join(f"{q.name}={e:.4f}" for q, e in table.items()))
    ao = torchao_available()
    if not ao:
        ctx.log(f"torchao arms skipped: {TORCHAO_MISSING}")

    rows = []
    qcache: dict = {}  # (layer, spec) -> quantized layer, shared by every arm (encode once)

    def add(method, budget, m, core_bits, allin_bits, predicted=None, extra=None):
        row = {
            "method": method,
            "budget": budget,
            "bpb": bpb(m),
            "kl": model_kl(m, ref_logits, tokens),
            "bits": core_bits,
            "bits_all_in": allin_bits,
            "predicted_kl": predicted,
        }
        row.update(extra or {})
        rows.append(row)
        ctx.log(
            f"  b̄={budget:g} {method:>14}: bpb {row['bpb']:.4f} (fp {fp_bpb:.4f}) kl {row['kl']:.4f}"
            f" bits {core_bits:.3f} all-in {allin_bits:.3f}"
            + ("" if predicted is None else f" predicted kl {predicted:.4f}")
        )

    def ours(method, budget, assignment, groups=()):
        m = copy.deepcopy(base)
        quantize_llama(m, assignment, groups, cache=qcache)
        core, allin = _stored_bits(m, names)
        pred = sum(sens[n] * table[parse_spec(assignment[n])] for n in names)
        extra = {"groups": [list(gr) for gr in groups]} if groups else {}
        extra["assignment"] = {n: str(s) for n, s in assignment.items()}
        add(method, budget, m, core, allin, pred, extra)

    for budget in budgets:
        b_int = round(budget)
        if abs(budget - b_int) < 1e-9:
            for sym in (True,) if ctx.quick else (True, False):  # quick: RTN/TCQ/MSQ (issue)
                m = copy.deepcopy(base)
                bits = _fake_quant(
                    m,
                    lambda n, w, b=b_int, s=sym: rtn_quantize(
                        w, b, min(128, w.shape[1]), symmetric=s
                    ),
                )
                add("rtn-g128" + ("" if sym else "-asym"), budget, m, bits, bits)
            if ao and b_int in (2, 3, 4):
                m = copy.deepcopy(base)
                bits = _fake_quant(
                    m,
                    lambda n, w, b=b_int: (
                        torchao_rtn(w, b, min(128, w.shape[1])),
                        b + 16 / min(128, w.shape[1]),
                    ),
                )
                add("torchao-rtn", budget, m, bits, bits)
            if not ctx.quick:
                m = copy.deepcopy(base)
                bits = _fake_quant(m, lambda n, w, b=b_int: nf_quantize(w, b, 64))
                add("nf", budget, m, bits, bits)
            if ao and (b_int == 4 or (ctx.quick and budget == budgets[-1])):
                m = copy.deepcopy(base)
                bits = _fake_quant(m, lambda n, w: torchao_nf4(w))
                add("torchao-nf4", 4.0, m, bits, bits)  # NF4 is 4-bit whatever the budget
            if not ctx.quick:
                ours("higgs-like", budget, {n: f"nuq-{b_int}" for n in names})
        single = QuantizerSpec("tcq", budget, L=L) if 2 * budget < L else None
        if single is not None:
            ours("tcq", budget, {n: single for n in names})
        if not ctx.quick:
            try:
                a, _ = solve_memory_msq(sens, shapes, budget, table, int_palette)
                ours("msq-int", budget, a)
            except ValueError as e:
                ctx.log(f"  msq-int at {budget}: {e}")
        a, gr = solve_memory_msq(sens, shapes, budget, table, palette, families=families(names))
        ours("msq-memory", budget, a, gr)
        if ctx.quick:  # latency MSQ's Viterbi arms are the full run's
            continue
        ref = single if single is not None else parse_spec(f"nuq-{min(4, max(2, b_int))}")
        lat_budget = sum(proxy_latency(ref, s) for s in shapes.values())
        a, gr = solve_latency_msq(
            sens, shapes, llama_blocks(base), table, lat_budget, palette, memory_bits=budget
        )
        lat = _assignment_latency(a, gr, shapes)
        ours("msq-latency", budget, a, gr)
        rows[-1]["latency_us"] = lat * 1e6
        rows[-1]["latency_budget_us"] = lat_budget * 1e6

    for r in rows:
        base_rows = [x for x in rows if x["budget"] == r["budget"] and x["method"] == "rtn-g128"]
        ctx.record(
            "bpb",
            r["bpb"],
            "bits/byte",
            baseline="rtn-g128" if base_rows and r["method"] != "rtn-g128" else None,
            baseline_value=base_rows[0]["bpb"] if base_rows and r["method"] != "rtn-g128" else None,
            method=r["method"],
            budget=r["budget"],
            bits=round(r["bits"], 4),
            bits_all_in=round(r["bits_all_in"], 4),
            fp_bpb=round(fp_bpb, 4),
            L=L,
        )
    ctx.record("bpb", fp_bpb, "bits/byte", method="fp32", budget=32.0, bits=32.0)
    ctx.path("quality_runs.json").write_text(
        json.dumps(
            {"fp_bpb": fp_bpb, "L": L, "model": model_info, "sensitivities": sens, "rows": rows,
             "error_table": {q.name: e for q, e in table.items()}},
            indent=1,
        )
        + "\n"
    )  # fmt: skip
    methods = sorted({r["method"] for r in rows})
    series = {}
    for meth in methods:
        ys = []
        for b in budgets:
            hit = [r["bpb"] for r in rows if r["method"] == meth and r["budget"] == b]
            ys.append(hit[0] if hit else math.nan)
        series[meth] = ys
    plot_lines(
        budgets,
        series,
        ctx.path("quality_bpb.png"),
        xlabel="budget b̄ (bits/weight)",
        ylabel="held-out bits/byte",
        title=f"tiny Llama, {len(names)} projections (fp32 {fp_bpb:.3f}); TCQ L={L}",
    )


def _assignment_latency(assignment, groups, shapes):
    from .allocation import proxy_latency
    from .quantizers import parse_spec

    done, total = set(), 0.0
    for gr in groups:
        shape = (sum(shapes[m][0] for m in gr), shapes[gr[0]][1])
        total += proxy_latency(parse_spec(assignment[gr[0]]), shape)
        done |= set(gr)
    for n, q in assignment.items():
        if n not in done:
            total += proxy_latency(parse_spec(q), shapes[n])
    return total


def random_quantized(spec, shape, seed=0):
    """A QuantizedMatrix with random codes (any word stream is a valid tail-biting TCQ code)."""
    from .codebooks import gaussian_vq, lloyd_max_gaussian, trellis_q, trellis_tau
    from .quantizers import QuantizedMatrix, parse_spec

    spec = parse_spec(spec)
    n, k = shape
    g = torch.Generator().manual_seed(seed)
    scales = torch.rand(n, generator=g) + 0.5

    def words(*s):
        return torch.randint(-(2**31), 2**31 - 1, s, generator=g, dtype=torch.int64).to(torch.int32)

    if spec.kind == "tcq":
        kh = k // 2 if spec.half else k
        tiles = (n // 16) * (kh // 16)
        kvs = spec.kv if spec.half else spec.kv[:1]
        codes = tuple(words(tiles, 4 * kv) for kv in kvs)
        cb = trellis_tau(trellis_q(max(spec.kv)))
    elif spec.kind == "nuq":
        codes = (words(n, -(-k // 32), round(spec.bits)),)
        cb = lloyd_max_gaussian(round(spec.bits)).float()
    else:
        codes = (words(n, -(-(k // 2) // 32), round(2 * spec.bits)),)
        cb = gaussian_vq(spec.bits)
    return QuantizedMatrix(spec, (n, k), scales, codes, cb)


@SUITE.case("dequant_matmul", kind="speed")
def dequant_matmul(ctx: Context) -> None:
    """CPU path: dequantize (unpack + LUT) then matmul, against the fp32 matmul, batch 1 and 8."""
    # full: 2048² (not 4096²) so the --full suite stays within ~25 CPU-minutes on the shared cores
    n, k = ctx.pick(smoke=(64, 256), quick=(512, 1024), full=(2048, 2048))
    specs = ctx.pick(
        smoke=["tcq-3", "nuq-4"],
        quick=["tcq-2", "tcq-3", "tcq-3.25", "nuq-4", "vq-3"],
        full=["tcq-2", "tcq-3", "tcq-4", "tcq-3.25", "nuq-4", "vq-3"],
    )
    for m in ctx.pick(smoke=[1], quick=[1], full=[1, 8]):
        x = torch.randn(m, k)
        fns = {}
        qms = {s: random_quantized(s, (n, k)) for s in specs}
        w_fp = qms[specs[0]].dequantize().contiguous()
        fns["fp32 matmul"] = lambda w=w_fp, x=x: x @ w.T
        # outputs checked equal first: the fp32 matmul uses specs[0]'s dequantized weight
        torch.testing.assert_close(fns["fp32 matmul"](), x @ qms[specs[0]].dequantize().T)
        for s, qm in qms.items():
            fns[f"dequant+matmul {s}"] = lambda qm=qm, x=x: x @ qm.dequantize().T
        with single_thread():
            res = compare(fns, baseline="fp32 matmul", rounds=ctx.pick(3, 3, 5), min_time=0.0)
        res.record(ctx, n=n, k=k, batch=m)
        ctx.log(str(res))


@SUITE.case("viterbi_time", kind="speed")
def viterbi_time(ctx: Context) -> None:
    """Tail-biting Viterbi encode time per 16K weights (64 tiles) against L (KV = 2, one thread)."""
    from .codebooks import trellis_lut, trellis_tau
    from .quantizers import viterbi_tailbiting

    Ls = ctx.pick(smoke=[4, 6], quick=[6, 8, 10], full=[6, 8, 10, 12, 14, 16])
    tiles = ctx.pick(smoke=4, quick=16, full=16)  # the time is linear in tiles: reported per 64
    tau = trellis_tau(9)
    X = torch.randn(tiles, 128, 2, generator=torch.Generator().manual_seed(0))
    secs = []
    for L in Ls:
        lut = trellis_lut(L, 9, tau)
        with single_thread():
            t = time_fn(lambda lut=lut, L=L: viterbi_tailbiting(X, lut, L, 2), warmup=0,
                        repeats=ctx.pick(1, 1, 1))  # fmt: skip
        per16k = t.median * 64 / tiles
        secs.append(per16k)
        ctx.record("viterbi_time_per_16k_weights", per16k, "s", L=L, KV=2, tiles=tiles)
    plot_lines(Ls, {"tail-biting Viterbi": secs}, ctx.path("viterbi_time.png"), xlabel="L",
               ylabel="s per 16K weights", title="encode time vs trellis size", logy=True)  # fmt: skip


@SUITE.case("gemv_cost_model", kind="speed")
def gemv_cost_model(ctx: Context) -> None:
    """GEMV byte model: stored bytes and the proxy latency (5 µs + bytes / 1 TB/s) per quantizer."""
    from .allocation import proxy_latency
    from .quantizers import parse_spec, storage_bytes

    shapes = ctx.pick(
        smoke=[(64, 64)], quick=[(4096, 4096), (14336, 4096)], full=[(4096, 4096), (14336, 4096)]
    )
    for shape in shapes:
        fp16 = shape[0] * shape[1] * 2
        for s in ["tcq-2", "tcq-3", "tcq-3.25", "tcq-4", "nuq-4", "vq-3"]:
            q = parse_spec(s)
            nbytes = storage_bytes(q, shape) + 2 * shape[0]
            ctx.record("gemv_bytes", nbytes, "B", baseline="fp16", baseline_value=fp16,
                       spec=s, n=shape[0], k=shape[1])  # fmt: skip
            ctx.record("proxy_latency", proxy_latency(q, shape) * 1e6, "us", spec=s,
                       n=shape[0], k=shape[1])  # fmt: skip
