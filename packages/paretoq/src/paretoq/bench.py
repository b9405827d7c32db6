"""The paretoq benchmark suite (``neurips25 bench paretoq``).

Quality (the reduced reproduction, the paper's fine-tuning regime): a tiny Llama pretrained in full
precision on the stdlib byte corpus (cached by the core), then quantization-aware fine-tuning at
bits {4, 3, 2, 1.58, 1} with ParetoQ's quantizers, against PTQ (round-to-nearest at the initial α)
and against full-precision training continued with the same recipe. Reports held-out bits/byte,
the relative change of the latent weights, the fraction of integer codes that flipped, the packed
model size, and the loss-vs-size plot (the Pareto front).

Speed (CPU): the packed matmul (torch path) against a dense fp32 ``nn.Linear`` and against
dequantize-then-matmul at M = 1, 8, 64; stored bytes. The Triton kernel's GPU timings live in
``benchmarks/gpu.py``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from neurips25_core.bench import Context, Suite, compare, plot_bars, plot_lines

SUITE = Suite(
    name="paretoq",
    paper="ParetoQ: Scaling Laws in Extremely Low-bit LLM Quantization",
    url="https://arxiv.org/abs/2502.02631",
)

QAT_BITS = (4, 3, 2, 1.58, 1)

#: The QAT recipe, scaled from the paper's (≤2-bit: 3× the steps at 2× the LR of 3/4-bit; AdamW,
#: weight decay 0, no warm-up, cosine to 0). Steps are ~10 % / 30 % of the 600 pretraining steps.
FULL_RECIPE = {
    "steps_high": 60,
    "lr_high": 5e-4,
    "steps_low": 180,
    "lr_low": 1e-3,
    "eval_batches": 20,
}
QUICK_RECIPE = {
    "steps_high": 20,
    "lr_high": 5e-4,
    "steps_low": 20,
    "lr_low": 1e-3,
    "eval_batches": 6,
}
#: Smoke: the core's 30-step toy Llama (width 32), 3 QAT steps on batches of 4×64 bytes.
SMOKE_RECIPE = {
    "steps_high": 3,
    "lr_high": 5e-4,
    "steps_low": 3,
    "lr_low": 1e-3,
    "eval_batches": 1,
    "batch_size": 4,
    "seq_len": 64,
}
FULL_WIDTHS = (128, 64)
QUICK_WIDTHS = (128,)


def _recipe(ctx: Context) -> dict[str, Any]:
    recipe = ctx.pick(smoke=SMOKE_RECIPE, quick=QUICK_RECIPE, full=FULL_RECIPE)
    return {"batch_size": 16, "seq_len": 128, **recipe}


def _base_model(ctx: Context, width: int) -> nn.Module:
    """The pretrained tiny Llama of this mode (the toy one in smoke), or the width-64 one (full)."""
    from neurips25_core.models import (
        pretrained_tiny_llama,
        pretrained_tiny_llama_for,
        tiny_llama_config,
    )

    if width == 128:
        return pretrained_tiny_llama_for(ctx.mode)
    return pretrained_tiny_llama(tiny_llama_config(hidden_size=width))


def _label(bits: float) -> str:
    return "FP" if bits >= 16 else ("1.58-bit" if bits == 1.58 else f"{int(bits)}-bit")


def _quantized_layers(model: nn.Module) -> dict[str, Any]:
    from paretoq import QuantLinear

    return {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear) and m.bits < 16}


@torch.no_grad()
def _codes(model: nn.Module) -> dict[str, torch.Tensor]:
    from paretoq import packing

    return {
        n: packing.weight_to_codes(m.weight, m.alpha, m.bits)[0]
        for n, m in _quantized_layers(model).items()
    }


def _qat_run(
    base: nn.Module,
    corpus,
    bits: float,
    steps: int,
    lr: float,
    eval_batches: int,
    seed: int,
    desc: str,
    eval_packed: bool = True,
    batch_size: int = 16,
    seq_len: int = 128,
) -> dict[str, float]:
    """Quantize a copy of ``base`` at ``bits``, measure PTQ, fine-tune, measure QAT and the changes.

    The fine-tuning is :func:`paretoq.train_qat` (AdamW, weight decay 0, no warm-up, cosine to 0).
    """
    import paretoq
    from neurips25_core.models import evaluate_bpb

    model = copy.deepcopy(base)
    out: dict[str, float] = {}
    if bits < 16:
        paretoq.quantize_(model, bits)
    out["ptq_bpb"] = evaluate_bpb(model, corpus, num_batches=eval_batches)
    layers = _quantized_layers(model) if bits < 16 else {
        n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and n != "lm_head"
    }  # fmt: skip
    w0 = {n: m.weight.detach().clone() for n, m in layers.items()}
    codes0 = _codes(model) if bits < 16 else {}
    res = paretoq.train_qat(
        model, corpus, bits, steps, lr, seed=seed, batch_size=batch_size, seq_len=seq_len
    )
    out["qat_bpb"] = evaluate_bpb(model, corpus, num_batches=eval_batches)
    out["train_seconds"] = res.seconds
    num = sum(float((m.weight.detach() - w0[n]).pow(2).sum()) for n, m in layers.items())
    den = sum(float(w0[n].pow(2).sum()) for n in layers)
    out["weight_change"] = math.sqrt(num / den)
    if bits < 16:
        codes1 = _codes(model)
        flipped = sum(int((codes1[n] != codes0[n]).sum()) for n in codes0)
        out["codes_flipped"] = flipped / sum(c.numel() for c in codes0.values())
        alphas = [m.alpha.detach() for m in _quantized_layers(model).values()]
        out["alpha_mean"] = float(torch.cat(alphas).mean())
        packed = paretoq.pack_(copy.deepcopy(model), backend="torch")
        out["size_bits"] = paretoq.model_size_bits(packed)
        out["arith_size_bits"] = paretoq.model_size_bits(model)
        if eval_packed:
            out["packed_bpb"] = evaluate_bpb(packed, corpus, num_batches=eval_batches)
    else:
        out["size_bits"] = out["arith_size_bits"] = paretoq.model_size_bits(model)
    return out


def _log_run(ctx: Context, row: dict[str, Any]) -> None:
    """Append one run to ``qat_runs.jsonl`` as soon as it finishes (long runs keep partial results)."""
    import json

    with open(ctx.path(f"qat_runs_{ctx.mode}.jsonl"), "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    parts = [
        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
        for k, v in row.items()
        if k != "meta"
    ]
    ctx.log("  " + " ".join(parts))


def _pareto_plot(
    points: dict[str, list[tuple[float, float]]], path, title: str, series_note: str = ""
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for name, pts in points.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel(
        "model size (MB: b bits/weight, ternary log2 3; 16-bit embeddings, norms, scales)"
    )
    ax.set_ylabel("validation bits/byte (QAT)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(title=series_note or None, title_fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@SUITE.case("qat_reproduction", kind="quality")
def qat_reproduction(ctx: Context) -> None:
    """PTQ vs QAT bits/byte per bit width and model width; weight change; the loss-vs-size front."""
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb

    recipe = _recipe(ctx)
    qat_bits = ctx.pick(smoke=(4, 2), quick=QAT_BITS, full=QAT_BITS)
    widths = FULL_WIDTHS if ctx.full else QUICK_WIDTHS
    corpus = stdlib_corpus()
    eb = recipe["eval_batches"]
    shape = {"batch_size": recipe["batch_size"], "seq_len": recipe["seq_len"]}
    front: dict[str, list[tuple[float, float]]] = {}
    change_by_width: dict[str, list[float]] = {}
    for width in widths:
        base = _base_model(ctx, width)
        width = base.config.hidden_size  # 32: the toy model of smoke mode
        fp_bpb = evaluate_bpb(base, corpus, num_batches=eb)
        n_params = sum(p.numel() for p in base.parameters())
        ctx.log(
            f"width {width}: {n_params / 1e6:.2f}M parameters, pretrained FP {fp_bpb:.4f} bits/byte"
        )
        _log_run(
            ctx,
            {
                "width": width,
                "bits": "fp_pretrained",
                "bpb": fp_bpb,
                "params": n_params,
                "meta": getattr(base, "neurips25_meta", {}),
            },
        )
        ctx.record("fp_pretrained_bpb", fp_bpb, "bits/byte", width=width, params=n_params)
        # FP baseline trained further with the longest (≤2-bit) recipe: QAT gets no extra-training edge.
        fp = _qat_run(
            base, corpus, 16, recipe["steps_low"], recipe["lr_low"], eb, seed=1,
            desc=f"FP w{width}", **shape,
        )  # fmt: skip
        ctx.record("fp_continued_bpb", fp["qat_bpb"], "bits/byte", baseline="FP pretrained",
                   baseline_value=fp_bpb, width=width, steps=recipe["steps_low"], lr=recipe["lr_low"])  # fmt: skip
        _log_run(
            ctx,
            {
                "width": width,
                "bits": 16,
                "steps": recipe["steps_low"],
                "lr": recipe["lr_low"],
                **fp,
            },
        )
        front.setdefault("FP (16-bit)", []).append((fp["size_bits"] / 8e6, fp["qat_bpb"]))
        changes = []
        runs: dict[float, dict[str, Any]] = {}
        for bits in qat_bits:
            low = bits <= 2
            steps = recipe["steps_low"] if low else recipe["steps_high"]
            lr = recipe["lr_low"] if low else recipe["lr_high"]
            eval_packed = ctx.full or bits == 2
            r = _qat_run(
                base,
                corpus,
                bits,
                steps,
                lr,
                eb,
                seed=1,
                desc=f"QAT {_label(bits)} w{width}",
                eval_packed=eval_packed,
                **shape,
            )
            common = {"width": width, "bits": bits, "steps": steps, "lr": lr}
            _log_run(
                ctx,
                {
                    "width": width,
                    "bits": bits,
                    "steps": steps,
                    "lr": lr,
                    "fp_bpb": fp_bpb,
                    "fp_continued_bpb": fp["qat_bpb"],
                    **r,
                },
            )
            ctx.record(
                "qat_bpb",
                r["qat_bpb"],
                "bits/byte",
                baseline="PTQ (RTN at init α)",
                baseline_value=r["ptq_bpb"],
                **common,
            )
            ctx.record(
                "qat_vs_fp_bpb",
                r["qat_bpb"],
                "bits/byte",
                baseline="FP continued",
                baseline_value=fp["qat_bpb"],
                **common,
            )
            if eval_packed:
                ctx.record(
                    "packed_bpb",
                    r["packed_bpb"],
                    "bits/byte",
                    baseline="QAT (QuantLinear)",
                    baseline_value=r["qat_bpb"],
                    **common,
                )
            ctx.record(
                "weight_change",
                r["weight_change"],
                "‖ΔW‖/‖W‖",
                baseline="FP continued",
                baseline_value=fp["weight_change"],
                **common,
            )
            ctx.record("codes_flipped", r["codes_flipped"], "fraction", **common)
            ctx.record(
                "packed_size",
                r["size_bits"] / 8e6,
                "MB",
                baseline="16-bit",
                baseline_value=fp["size_bits"] / 8e6,
                **common,
            )
            # The paper's convention: b bits per weight (ternary log2 3), not our 2-bit ternary storage.
            front.setdefault(_label(bits), []).append((r["arith_size_bits"] / 8e6, r["qat_bpb"]))
            changes.append(r["weight_change"])
            runs[bits] = {"steps": steps, "lr": lr, **r}
        change_by_width[f"width {width}"] = changes
        if ctx.full and width == 128:
            _equal_budgets(ctx, base, corpus, recipe, fp, runs, width)
    _pareto_plot(front, ctx.path("pareto.png"), f"ParetoQ reduced reproduction ({ctx.mode})")
    plot_bars([_label(b) for b in qat_bits], change_by_width, ctx.path("weight_change.png"),
              ylabel="‖W_qat − W_fp‖ / ‖W_fp‖", title="Relative latent-weight change after QAT")  # fmt: skip


def _equal_budgets(ctx: Context, base, corpus, recipe, fp_long, runs, width: int) -> None:
    """Every bit width (and FP) under both recipes, so widths compare at the same steps and LR."""
    eb = recipe["eval_batches"]
    budgets = {
        f"{recipe['steps_high']} steps @ {recipe['lr_high']:g}": (
            recipe["steps_high"],
            recipe["lr_high"],
        ),
        f"{recipe['steps_low']} steps @ {recipe['lr_low']:g}": (
            recipe["steps_low"],
            recipe["lr_low"],
        ),
    }
    all_bits = (16, *QAT_BITS)
    curves: dict[str, list[tuple[float, float]]] = {}
    changes: dict[str, list[float]] = {}
    for name, (steps, lr) in budgets.items():
        for bits in all_bits:
            if bits == 16 and steps == recipe["steps_low"]:
                r = fp_long
            elif bits < 16 and runs[bits]["steps"] == steps:
                r = runs[bits]
            else:
                r = _qat_run(
                    base,
                    corpus,
                    bits,
                    steps,
                    lr,
                    eb,
                    seed=1,
                    desc=f"{_label(bits)} w{width} {name}",
                    eval_packed=False,
                    batch_size=recipe["batch_size"],
                    seq_len=recipe["seq_len"],
                )
                _log_run(
                    ctx,
                    {
                        "variant": "equal_budget",
                        "width": width,
                        "bits": bits,
                        "steps": steps,
                        "lr": lr,
                        **r,
                    },
                )
            ctx.record("equal_budget_bpb", r["qat_bpb"], "bits/byte", baseline=None if bits == 16 else "PTQ (RTN at init α)",
                       baseline_value=None if bits == 16 else r["ptq_bpb"], width=width, bits=bits, steps=steps, lr=lr)  # fmt: skip
            ctx.record(
                "equal_budget_weight_change",
                r["weight_change"],
                "‖ΔW‖/‖W‖",
                width=width,
                bits=bits,
                steps=steps,
                lr=lr,
            )
            curves.setdefault(name, []).append((r["arith_size_bits"] / 8e6, r["qat_bpb"]))
            changes.setdefault(name, []).append(r["weight_change"])
    _pareto_plot(curves, ctx.path("pareto_equal_budget.png"), f"Equal QAT budget per bit width (width {width})",
                 series_note="each curve: FP, 4, 3, 2, 1.58, 1 bits (right to left)")  # fmt: skip
    plot_bars([_label(b) for b in all_bits], changes, ctx.path("weight_change_equal_budget.png"),
              ylabel="‖W_after − W_fp‖ / ‖W_fp‖", title=f"Latent-weight change at equal budget (width {width})")  # fmt: skip


@SUITE.case("packed_matmul_cpu", kind="speed")
def packed_matmul_cpu(ctx: Context) -> None:
    """Packed matmul (torch path) vs fp32 nn.Linear and vs dequantize+matmul (two dequantizers).

    Interleaved medians (``neurips25_core.bench.compare``) at the machine's default thread count.
    Two dequantize-then-matmul baselines: ``PackedLinear.dequantize`` (the unoptimised reference:
    one ``torch.cat`` of shifted slices per plane, int64 codes) and the fastest torch dequantizer
    we have (:func:`paretoq.packing.dequantize_packed_fast`: one broadcast shift over all the words,
    int32 codes); ``time_vs_dequant`` is against the faster of the two in this run.
    """
    import paretoq
    from neurips25_core.testing import assert_close, randn
    from paretoq.packing import dequantize_packed_fast

    n = k = ctx.pick(smoke=256, quick=1024, full=2048)
    bits_list = ctx.pick(smoke=(2,), quick=(2, 4), full=QAT_BITS)
    ms = ctx.pick(smoke=(1, 8), quick=(1, 8, 64), full=(1, 8, 64))
    min_time = ctx.pick(smoke=0.02, quick=0.2, full=0.5)
    lin = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(randn(n, k, seed=0, scale=0.02))
    speedups: dict[str, list[float]] = {}
    for bits in bits_list:
        q = paretoq.QuantLinear.from_linear(copy.deepcopy(lin), bits)
        p = paretoq.PackedLinear.from_quant_linear(q, backend="torch")
        stored = p.stored_bits() / 8
        ctx.record("weight_bytes", stored, "B", baseline="fp32 dense", baseline_value=n * k * 4,
                   bits=bits, N=n, K=k)  # fmt: skip
        ctx.record("weight_bytes_vs_bf16", stored, "B", baseline="bf16 dense",
                   baseline_value=n * k * 2, bits=bits, N=n, K=k)  # fmt: skip
        ys = []
        with torch.inference_mode():
            for m in ms:
                x = randn(m, k, seed=m)
                fns = _packed_fns(x, lin, p, dequantize_packed_fast)
                ref = fns["dequantize+matmul (reference)"]()
                for name, fn in fns.items():  # outputs equal before anything is timed
                    if name != "fp32 nn.Linear":
                        assert_close(fn(), ref, rtol=1e-5, name=name)
                cmp = compare(fns, baseline="fp32 nn.Linear", min_time=min_time)
                shape = dict(bits=bits, M=m, N=n, K=k)
                cmp.record(ctx, metric="time", **shape)
                ours = cmp["packed (torch)"].median
                deq = min(
                    ("dequantize+matmul (reference)", "dequantize+matmul (fast)"),
                    key=lambda name: cmp[name].median,
                )
                ctx.record("time_vs_dequant", ours, "s", baseline=deq,
                           baseline_value=cmp[deq].median, **shape)  # fmt: skip
                ys.append(cmp.ratios["packed (torch)"])
        speedups[_label(bits)] = ys
    plot_lines(list(ms), speedups, ctx.path("packed_matmul_cpu.png"), xlabel="M (tokens)",
               ylabel="speed-up vs fp32 nn.Linear (median; >1: packed faster)",
               title=f"CPU packed matmul, N=K={n}", logx=True)  # fmt: skip


def _packed_fns(x, lin, p, fast) -> dict:
    """The timed paths of one shape; the first, dense fp32 ``nn.Linear``, is the baseline."""
    planes, scale, bits, k = p.planes, p.scale, p.bits, p.in_features
    return {
        "fp32 nn.Linear": lambda: lin(x),
        "packed (torch)": lambda: p(x),
        "dequantize+matmul (reference)": lambda: x @ p.dequantize().T,
        "dequantize+matmul (fast)": lambda: x @ fast(planes, scale, bits, k, torch.float32).T,
    }


@SUITE.case("model_size", kind="speed")
def model_size(ctx: Context) -> None:
    """Stored size of a packed tiny Llama per bit width vs 16-bit, and the arithmetic count."""
    import paretoq
    from neurips25_core.models import tiny_llama, tiny_llama_config

    hidden = ctx.pick(smoke=32, quick=128, full=256)
    config = tiny_llama_config(hidden_size=hidden, num_heads=2 if ctx.smoke else 4)
    fp_bits = paretoq.model_size_bits(tiny_llama(config))
    for bits in QAT_BITS:
        model = paretoq.quantize_(tiny_llama(config), bits)
        arith = paretoq.model_size_bits(model)
        paretoq.pack_(model)
        stored = paretoq.model_size_bits(model)
        if bits == 1.58:
            base3 = paretoq.model_size_bits(model, ternary_base3=True)
            ctx.record("base3_model_size", base3 / 8e6, "MB", baseline="2-bit ternary planes", baseline_value=stored / 8e6,
                       bits=bits, hidden=config.hidden_size)  # fmt: skip
        ctx.record("packed_model_size", stored / 8e6, "MB", baseline="16-bit model", baseline_value=fp_bits / 8e6,
                   bits=bits, hidden=config.hidden_size)  # fmt: skip
        ctx.record("packed_vs_arithmetic", stored / 8e6, "MB", baseline="arithmetic count", baseline_value=arith / 8e6,
                   bits=bits, hidden=config.hidden_size)  # fmt: skip


@SUITE.case("ablation_2bit_grid", kind="quality")
def ablation_2bit_grid(ctx: Context) -> None:
    """2-bit QAT: SEQ (levels ±1/4, ±3/4 of α) vs the LSQ grid (levels −2, −1, 0, 1 of α), width 128."""
    import paretoq
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb
    from paretoq.ops import _LsqQuant

    class _Lsq2BitLinear(paretoq.QuantLinear):
        def quantized_weight(self) -> torch.Tensor:
            return _LsqQuant.apply(self.weight, self.alpha, 2)

    recipe = _recipe(ctx)
    steps, lr, eb = recipe["steps_low"], recipe["lr_low"], recipe["eval_batches"]
    corpus = stdlib_corpus()
    base = _base_model(ctx, 128)
    width = base.config.hidden_size
    out = {}
    for grid in ("SEQ", "LSQ"):
        model = paretoq.quantize_(copy.deepcopy(base), 2)
        if grid == "LSQ":
            for m in model.modules():
                if isinstance(m, paretoq.QuantLinear):
                    m.__class__ = _Lsq2BitLinear
                    with torch.no_grad():  # LSQ's rule max|W|/(2^(b−1) − 1) at b = 2
                        m.alpha.copy_(m.weight.abs().amax(dim=-1, keepdim=True))
        ptq = evaluate_bpb(model, corpus, num_batches=eb)
        layers = _quantized_layers(model)
        w0 = {n: m.weight.detach().clone() for n, m in layers.items()}
        paretoq.train_qat(model, corpus, 2, steps, lr, seed=1, batch_size=recipe["batch_size"],
                          seq_len=recipe["seq_len"])  # fmt: skip
        qat = evaluate_bpb(model, corpus, num_batches=eb)
        num = sum(float((m.weight.detach() - w0[n]).pow(2).sum()) for n, m in layers.items())
        change = math.sqrt(num / sum(float(w.pow(2).sum()) for w in w0.values()))
        out[grid] = {"ptq_bpb": ptq, "qat_bpb": qat, "weight_change": change}
        _log_run(
            ctx,
            {
                "variant": f"2bit_{grid}",
                "width": width,
                "bits": 2,
                "steps": steps,
                "lr": lr,
                **out[grid],
            },
        )
    for metric in ("ptq_bpb", "qat_bpb"):
        ctx.record(metric, out["SEQ"][metric], "bits/byte", baseline="LSQ 2-bit grid", baseline_value=out["LSQ"][metric],
                   width=width, bits=2, steps=steps, lr=lr)  # fmt: skip


def _torchao_arms(lin: nn.Module) -> dict:
    """torchao's CPU paths on the same fp32 layer (``peers`` extra): int4 tinygemm, int2 intx."""
    arms: dict = {}
    try:
        import torchao  # noqa: F401
        from torchao.quantization import IntxWeightOnlyConfig, quantize_
    except ImportError:
        return arms
    try:
        try:  # torchao >= 0.15: the CPU tinygemm (Int4OpaqueTensor) lives in the prototype
            from torchao.prototype.quantization.int4.inference_workflow import (
                PrototypeInt4WeightOnlyConfig,
            )

            config = PrototypeInt4WeightOnlyConfig(group_size=128, set_inductor_config=False)
        except ImportError:
            from torchao.dtypes import Int4CPULayout
            from torchao.quantization import Int4WeightOnlyConfig

            config = Int4WeightOnlyConfig(group_size=128, layout=Int4CPULayout(), version=1)
        m = copy.deepcopy(lin).to(torch.bfloat16)
        quantize_(m, config)
        arms["torchao int4 tinygemm (bf16)"] = (m, torch.bfloat16)
    except Exception as exc:  # a peer that does not run here is skipped, not fatal
        arms["torchao int4 tinygemm (bf16)"] = exc
    try:
        m = copy.deepcopy(lin)
        quantize_(m, IntxWeightOnlyConfig(weight_dtype=torch.int2, granularity=_per_axis()))
        arms["torchao IntxWeightOnly int2"] = (m, torch.float32)
    except Exception as exc:
        arms["torchao IntxWeightOnly int2"] = exc
    return arms


def _per_axis():
    from torchao.quantization.granularity import PerAxis

    return PerAxis(0)


@SUITE.case("cpu_kernels", kind="speed")
def cpu_kernels(ctx: Context) -> None:
    """The numba byte-lookup packed matmul vs dense fp32 ``F.linear`` vs torchao, N = 1..16.

    ``PackedLinear`` (numba, ``cpu`` extra) at 1, 1.58, 2, 3, 4 bits and its torch path, against
    dense fp32 and torchao's int4 tinygemm (bf16 activations, group 128) and
    ``IntxWeightOnlyConfig`` int2 (per row) on the same layer (``peers`` extra; skipped with a
    message when absent or failing). Batch-1 effective bandwidth = packed bytes (uint8 code bytes
    + fp32 scales) / time as a fraction of the core roofline copy bandwidth; the crossover N where
    dense overtakes ours, beside the byte-count model ``N* = (4MK − B)/BW / (t₁ − B/BW)``.
    """
    import math

    import paretoq
    from neurips25_core.bench import num_threads, roofline, single_thread
    from neurips25_core.testing import assert_close, randn
    from paretoq.cpu import numba_available

    if not numba_available():
        ctx.log("cpu_kernels skipped: numba absent (pip install 'paretoq[cpu]')")
        return
    shapes = ctx.pick(smoke=[(128, 200)], quick=[(4096, 4096)],
                      full=[(4096, 4096), (14336, 4096), (4096, 14336)])  # fmt: skip
    tokens = ctx.pick(smoke=(1, 4), quick=(1, 2, 4, 8, 16), full=(1, 2, 4, 8, 16))
    bits_list = ctx.pick(smoke=(2,), quick=(2, 4), full=QAT_BITS)
    threads = ctx.pick(smoke=(1,), quick=(1,), full=(1, 2))
    min_time = ctx.pick(smoke=0.01, quick=0.15, full=0.5)
    bw = roofline(
        matmul_size=ctx.pick(smoke=256, quick=1024, full=2048),
        copy_bytes=ctx.pick(smoke=16 << 20, quick=256 << 20, full=256 << 20),
        min_time=ctx.pick(smoke=0.1, quick=0.5, full=1.0),
    )["bandwidth"]
    ctx.record("copy_bandwidth", bw / 1e9, "GB/s", lower_is_better=False)
    for rows, k in shapes:
        lin = nn.Linear(k, rows, bias=False)
        with torch.no_grad():
            lin.weight.copy_(randn(rows, k, seed=0, scale=0.02))
        arms = _torchao_arms(lin)
        if not arms:
            ctx.log("torchao arms skipped: torchao absent (pip install 'paretoq[peers]')")
        for name, arm in list(arms.items()):
            if isinstance(arm, Exception):
                ctx.log(f"{name} skipped: {type(arm).__name__}: {arm}")
                del arms[name]
        packed = {}
        for bits in bits_list:
            q = paretoq.QuantLinear.from_linear(copy.deepcopy(lin), bits)
            packed[bits] = paretoq.PackedLinear.from_quant_linear(q, backend="numba")
            packed[bits].cpu_layout()
        curves: dict[str, list[float]] = {}
        for nt in threads:
            with torch.inference_mode(), single_thread() if nt == 1 else num_threads(nt):
                for n in tokens:
                    x = randn(n, k, seed=n)
                    fns = {"dense fp32 F.linear": lambda x=x, lin=lin: lin(x)}
                    for bits, p in packed.items():
                        fns[f"ours numba {_label(bits)}"] = lambda x=x, p=p: p(x)
                    p2 = packed[bits_list[0]]
                    fns[f"ours torch {_label(bits_list[0])}"] = lambda x=x, p=p2, k=k: (
                        paretoq.packing.packed_matmul_torch(x, p.planes, p.scale, p.bits, k)
                    )
                    for name, (mod, dt) in arms.items():
                        fns[name] = lambda x=x, mod=mod, dt=dt: mod(x.to(dt))
                    for bits, p in packed.items():  # outputs equal before anything is timed
                        ref = x.double() @ p.dequantize(torch.float64).T
                        assert_close(p(x), ref, rtol=1e-5, name=f"numba {bits}")
                    cmp = compare(
                        fns, baseline="dense fp32 F.linear", min_time=min_time, cpu_time=True
                    )
                    cmp.record(ctx, metric="time", M=rows, K=k, N=n, threads=nt)
                    # process CPU time beside wall: under load, wall time of the longer calls includes
                    # waiting for a core (see README)
                    for key, t in cmp.cpu.items():
                        base = cmp.cpu["dense fp32 F.linear"].median
                        ctx.record("cpu_time", t.median, "s", impl=key, M=rows, K=k, N=n, threads=nt,
                                   baseline=None if key.startswith("dense") else "dense fp32 F.linear",
                                   baseline_value=None if key.startswith("dense") else base)  # fmt: skip
                    if nt == 1:
                        for key in fns:
                            curves.setdefault(key, []).append(cmp[key].median * 1e3)
                    ctx.log(f"  {rows}x{k} N={n} t={nt}: " + ", ".join(
                        f"{key} {cmp[key].median * 1e3:.2f} ms" for key in fns
                    ) + f" (load {cmp.load_start}->{cmp.load_end})")  # fmt: skip
                    for name in arms:
                        ctx.record("time_vs_torchao", cmp[f"ours numba {_label(bits_list[0])}"].median,
                                   "s", baseline=name, baseline_value=cmp[name].median,
                                   bits=bits_list[0], M=rows, K=k, N=n, threads=nt)  # fmt: skip
                    for bits, p in packed.items():
                        key = f"ours numba {_label(bits)}"
                        nbytes = p.cpu_layout().nbytes + 4 * (k + rows)
                        if n == 1:
                            t1 = cmp[key].median
                            ctx.record("batch1_bandwidth_fraction", nbytes / t1 / bw, "of copy BW",
                                       lower_is_better=False, bits=bits, M=rows, K=k, threads=nt,
                                       bytes=nbytes)  # fmt: skip
                            per_token = t1 - nbytes / bw
                            model = (
                                (4 * rows * k - nbytes) / bw / per_token
                                if per_token > 0
                                else math.inf
                            )
                            ctx.record("crossover_bytes_model", model, "tokens", bits=bits, M=rows,
                                       K=k, threads=nt)  # fmt: skip
        for bits in bits_list:
            key = f"ours numba {_label(bits)}"
            if key in curves:
                ours, dense = curves[key], curves["dense fp32 F.linear"]
                diff = [o - d for o, d in zip(ours, dense)]
                if diff[-1] <= 0:
                    cross, bound = float(tokens[-1]), ">"
                elif all(d > 0 for d in diff):
                    cross, bound = float(tokens[0]), "<="
                else:
                    i = max(j for j, d in enumerate(diff) if d <= 0)
                    cross = tokens[i] + (tokens[i + 1] - tokens[i]) * -diff[i] / (
                        diff[i + 1] - diff[i]
                    )
                    bound = "="
                ctx.record("crossover_vs_dense", cross, "tokens", bits=bits, M=rows, K=k,
                           threads=1, bound=bound)  # fmt: skip
        plot_lines(list(tokens), curves, ctx.path(f"cpu_kernels_{rows}x{k}.png"),
                   xlabel="tokens N", ylabel="ms (median, 1 thread)",
                   title=f"CPU packed matmul {rows}x{k}", logx=True, logy=True)  # fmt: skip
