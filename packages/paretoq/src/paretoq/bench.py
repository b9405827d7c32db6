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

from neurips25_core.bench import Context, Suite, plot_bars, plot_lines, time_fn

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
FULL_WIDTHS = (128, 64)
QUICK_WIDTHS = (128,)


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
) -> dict[str, float]:
    """Quantize a copy of ``base`` at ``bits``, measure PTQ, fine-tune, measure QAT and the changes."""
    import paretoq
    from neurips25_core.models import evaluate_bpb, train

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
    res = train(
        model, corpus, steps,
        optimizer=lambda params: torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95)),
        warmup=0, min_lr_ratio=0.0, seed=seed, desc=desc,
    )  # fmt: skip
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
    from neurips25_core.models import evaluate_bpb, pretrained_tiny_llama, tiny_llama_config

    recipe = QUICK_RECIPE if ctx.quick else FULL_RECIPE
    widths = QUICK_WIDTHS if ctx.quick else FULL_WIDTHS
    corpus = stdlib_corpus()
    eb = recipe["eval_batches"]
    front: dict[str, list[tuple[float, float]]] = {}
    change_by_width: dict[str, list[float]] = {}
    for width in widths:
        config = None if width == 128 else tiny_llama_config(hidden_size=width)
        base = pretrained_tiny_llama(config)
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
            base, corpus, 16, recipe["steps_low"], recipe["lr_low"], eb, seed=1, desc=f"FP w{width}"
        )
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
        for bits in QAT_BITS:
            low = bits <= 2
            steps = recipe["steps_low"] if low else recipe["steps_high"]
            lr = recipe["lr_low"] if low else recipe["lr_high"]
            eval_packed = not ctx.quick or bits == 2
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
        if not ctx.quick and width == 128:
            _equal_budgets(ctx, base, corpus, recipe, fp, runs, width)
    _pareto_plot(front, ctx.path("pareto.png"), f"ParetoQ reduced reproduction ({ctx.mode})")
    plot_bars([_label(b) for b in QAT_BITS], change_by_width, ctx.path("weight_change.png"),
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
    """Packed matmul (torch path) vs dense fp32 nn.Linear and vs dequantize+matmul, M = 1, 8, 64."""
    import paretoq
    from neurips25_core.testing import randn

    n = k = 1024 if ctx.quick else 2048
    bits_list = (2, 4) if ctx.quick else QAT_BITS
    ms = (1, 8, 64)
    lin = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(randn(n, k, seed=0, scale=0.02))
    speedups: dict[str, list[float]] = {}
    for bits in bits_list:
        q = paretoq.QuantLinear.from_linear(copy.deepcopy(lin), bits)
        p = paretoq.PackedLinear.from_quant_linear(q, backend="torch")
        stored = p.stored_bits() / 8
        ctx.record(
            "weight_bytes",
            stored,
            "B",
            baseline="fp32 dense",
            baseline_value=n * k * 4,
            bits=bits,
            N=n,
            K=k,
        )
        ctx.record(
            "weight_bytes_vs_bf16",
            stored,
            "B",
            baseline="bf16 dense",
            baseline_value=n * k * 2,
            bits=bits,
            N=n,
            K=k,
        )
        ys = []
        with torch.inference_mode():
            for m in ms:
                x = randn(m, k, seed=m)
                dense = time_fn(lambda x=x: lin(x))
                ours = time_fn(lambda x=x, p=p: p(x))
                deq = time_fn(lambda x=x, p=p: x @ p.dequantize().T)
                ctx.record(
                    "time",
                    ours.median,
                    "s",
                    baseline="fp32 nn.Linear",
                    baseline_value=dense.median,
                    bits=bits,
                    M=m,
                    N=n,
                    K=k,
                )
                ctx.record(
                    "time_vs_dequant",
                    ours.median,
                    "s",
                    baseline="dequantize+matmul",
                    baseline_value=deq.median,
                    bits=bits,
                    M=m,
                    N=n,
                    K=k,
                )
                ys.append(dense.median / ours.median)
        speedups[_label(bits)] = ys
    plot_lines(list(ms), speedups, ctx.path("packed_matmul_cpu.png"), xlabel="M (tokens)",
               ylabel="speed-up vs fp32 nn.Linear (>1: packed faster)", title=f"CPU packed matmul, N=K={n}", logx=True)  # fmt: skip


@SUITE.case("model_size", kind="speed")
def model_size(ctx: Context) -> None:
    """Stored size of a packed tiny Llama per bit width vs 16-bit, and the arithmetic count."""
    import paretoq
    from neurips25_core.models import tiny_llama, tiny_llama_config

    config = tiny_llama_config(hidden_size=128 if ctx.quick else 256)
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


@SUITE.case("ablation_2bit_grid", kind="quality", modes=("full",))
def ablation_2bit_grid(ctx: Context) -> None:
    """2-bit QAT: SEQ (levels ±1/4, ±3/4 of α) vs the LSQ grid (levels −2, −1, 0, 1 of α), width 128."""
    import paretoq
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import evaluate_bpb, pretrained_tiny_llama, train
    from paretoq.ops import _LsqQuant

    class _Lsq2BitLinear(paretoq.QuantLinear):
        def quantized_weight(self) -> torch.Tensor:
            return _LsqQuant.apply(self.weight, self.alpha, 2)

    recipe = FULL_RECIPE
    steps, lr, eb = recipe["steps_low"], recipe["lr_low"], recipe["eval_batches"]
    corpus = stdlib_corpus()
    base = pretrained_tiny_llama()
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
        train(
            model, corpus, steps,
            optimizer=lambda params: torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95)),
            warmup=0, min_lr_ratio=0.0, seed=1, desc=f"2-bit {grid}",
        )  # fmt: skip
        qat = evaluate_bpb(model, corpus, num_batches=eb)
        num = sum(float((m.weight.detach() - w0[n]).pow(2).sum()) for n, m in layers.items())
        change = math.sqrt(num / sum(float(w.pow(2).sum()) for w in w0.values()))
        out[grid] = {"ptq_bpb": ptq, "qat_bpb": qat, "weight_change": change}
        _log_run(
            ctx,
            {
                "variant": f"2bit_{grid}",
                "width": 128,
                "bits": 2,
                "steps": steps,
                "lr": lr,
                **out[grid],
            },
        )
    for metric in ("ptq_bpb", "qat_bpb"):
        ctx.record(metric, out["SEQ"][metric], "bits/byte", baseline="LSQ 2-bit grid", baseline_value=out["LSQ"][metric],
                   width=128, bits=2, steps=steps, lr=lr)  # fmt: skip
