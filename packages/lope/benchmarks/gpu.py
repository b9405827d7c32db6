"""GPU benchmark for lope: the Triton expert-mix kernel against the torch paths, and a LoPE step.

Run on a CUDA machine from the repository root (about 5 minutes on an H100/H200)::

    uv run --with peft==0.21.2 python packages/lope/benchmarks/gpu.py --out lope-gpu.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU; the tests
do this so the script is known to work; its timings mean nothing). Sections:

1. correctness: ``expert_mix`` with ``backend="triton"``, ``"torch"`` (one GEMM over K = N·r) and
   the per-expert loop (HydraLoRA's form) against the float64 loop, forward and backward
   (h, gates, B), in float32 (rtol 1e-5) and bfloat16 (rtol 1.6e-2);
2. speed of ``y = s·Σ_n g_n B_n h`` at LLaMA-7B MLP shapes (out = 11008 for gate/up, 4096 for
   down), T = 4096 tokens, r ∈ {4, 8}, N = 4, float32 and bfloat16: forward and forward+backward
   of Triton, the torch single GEMM and the per-expert loop (the baseline), next to the base
   layer's own GEMM ``x @ W0ᵀ`` for scale;
3. one training step (forward, backward, AdamW) of a randomly initialised ~1B Llama in bfloat16
   with LoPE (r = 4, N = 4, gate/up/down, Stage II) against peft's LoRA (r = 4, same targets; the
   ``peers`` extra, skipped with a message when absent).

Timings are medians of CUDA-event timings (``neurips25_core.bench.time_fn``) after warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from lope import LoPEConfig, expert_mix, get_peft_model
from lope.reference import expert_mix_reference

from neurips25_core.bench import environment, peak_memory_cuda, time_fn
from neurips25_core.testing import relative_error

RTOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}


def loop_mix(h, gates, B, scaling):
    """HydraLoRA's form: one GEMM per expert, weighted and summed (the baseline)."""
    g = gates.to(h.dtype)
    out = g[:, 0:1] * (h @ B[0].T)
    for n in range(1, B.shape[0]):
        out = out + g[:, n : n + 1] * (h @ B[n].T)
    return out * scaling


def _mix(variant):
    if variant == "loop":
        return loop_mix
    return lambda h, g, B, s: expert_mix(h, g, B, s, backend=variant)


def _inputs(T, out, N, r, dtype, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(T, r, generator=gen, dtype=torch.float64)
    gates = torch.softmax(torch.randn(T, N, generator=gen, dtype=torch.float64), -1)
    B = torch.randn(N, out, r, generator=gen, dtype=torch.float64) / r**0.5
    up = torch.randn(T, out, generator=gen, dtype=torch.float64)
    return [t.to(device) for t in (h, gates, B, up)]


def correctness(device, toy: bool) -> list[dict]:
    shapes = [(7, 33, 4, 3), (129, 64, 5, 4)] if toy else [(4096, 11008, 4, 4), (777, 1000, 5, 4)]
    rows = []
    for T, out, N, r in shapes:
        h64, g64, B64, up64 = _inputs(T, out, N, r, torch.float64, device)
        leaves64 = [t.clone().requires_grad_() for t in (h64, g64, B64)]
        ref = expert_mix_reference(*leaves64, 8.0)
        ref_grads = torch.autograd.grad(ref, leaves64, up64)
        for dtype in (torch.float32, torch.bfloat16):
            for variant in ("triton", "torch", "loop"):
                leaves = [
                    t.to(dtype if i != 1 else torch.float32).requires_grad_()
                    for i, t in enumerate((h64, g64, B64))
                ]
                y = _mix(variant)(*leaves, 8.0)
                grads = torch.autograd.grad(y, leaves, up64.to(y.dtype))
                row = {
                    "T": T,
                    "out": out,
                    "N": N,
                    "r": r,
                    "dtype": str(dtype).removeprefix("torch."),
                    "variant": variant,
                    "out_err": relative_error(y, ref),
                    **{
                        f"grad_{n}_err": relative_error(gr, rg)
                        for n, gr, rg in zip(("h", "gates", "B"), grads, ref_grads)
                    },
                }
                row["ok"] = all(
                    row[k] <= RTOL[dtype]
                    for k in ("out_err", "grad_h_err", "grad_gates_err", "grad_B_err")
                )
                rows.append(row)
                print(
                    f"  {variant:6s} {row['dtype']:8s} T{T} out{out} N{N} r{r}: out "
                    f"{row['out_err']:.1e}, grad h {row['grad_h_err']:.1e}, gates "
                    f"{row['grad_gates_err']:.1e}, B {row['grad_B_err']:.1e} "
                    f"{'ok' if row['ok'] else 'FAIL'}"
                )
    return rows


def _time(fn, toy):
    t = time_fn(fn, warmup=0 if toy else 3, repeats=1 if toy else None, min_time=0.3)
    return t.median * 1e3


def speed(device, toy: bool) -> list[dict]:
    if toy:
        grid = [(16, 24, 40, 4, torch.float32)]
    else:
        grid = [
            (4096, d_in, d_out, r, dtype)
            for d_in, d_out in ((4096, 11008), (11008, 4096))
            for r in (4, 8)
            for dtype in (torch.float32, torch.bfloat16)
        ]
    N = 4
    rows = []
    for T, d_in, d_out, r, dtype in grid:
        h64, g64, B64, up64 = _inputs(T, d_out, N, r, dtype, device)
        h, B, up = h64.to(dtype), B64.to(dtype), up64.to(dtype)
        gates = g64.to(torch.float32)
        x = torch.randn(T, d_in, device=device, dtype=dtype)
        W = torch.randn(d_out, d_in, device=device, dtype=dtype) / d_in**0.5
        row = {
            "T": T,
            "in": d_in,
            "out": d_out,
            "r": r,
            "N": N,
            "dtype": str(dtype).removeprefix("torch."),
            "base_gemm_ms": _time(lambda x=x, W=W: x @ W.T, toy),
        }
        for variant in ("triton", "torch", "loop"):
            mix = _mix(variant)
            row[f"{variant}_fwd_ms"] = _time(
                lambda mix=mix, h=h, gates=gates, B=B: mix(h, gates, B, 8.0), toy
            )
            leaves = [t.detach().clone().requires_grad_() for t in (h, gates, B)]

            def step(mix=mix, leaves=leaves, up=up):
                y = mix(*leaves, 8.0)
                torch.autograd.grad(y, leaves, up)

            row[f"{variant}_fwd_bwd_ms"] = _time(step, toy)
            if device.type == "cuda":
                row[f"{variant}_fwd_bwd_peak_MiB"] = peak_memory_cuda(step) / 2**20
        for kind in ("fwd", "fwd_bwd"):
            row[f"loop_over_triton_{kind}"] = row[f"loop_{kind}_ms"] / row[f"triton_{kind}_ms"]
            row[f"torch_over_triton_{kind}"] = row[f"torch_{kind}_ms"] / row[f"triton_{kind}_ms"]
        rows.append(row)
        print(
            "  "
            + ", ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
            )
        )
    return rows


def _llama(toy, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    if toy:
        cfg = LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=48,
        )
    else:  # TinyLlama-1.1B's shape, random weights
        cfg = LlamaConfig(
            vocab_size=32000,
            hidden_size=2048,
            num_hidden_layers=22,
            num_attention_heads=32,
            num_key_value_heads=4,
            intermediate_size=5632,
        )
    torch.manual_seed(0)
    dtype = torch.float32 if toy else torch.bfloat16
    with torch.device(device):  # initialise on the GPU: a 1.1B CPU init takes minutes
        return LlamaForCausalLM(cfg).to(dtype=dtype)


TARGETS = ["gate_proj", "up_proj", "down_proj"]


def model_step(device, toy: bool) -> list[dict]:
    batch, length = (2, 8) if toy else (4, 512)
    rows = []
    for arm in ("lope", "peft_lora"):
        model = _llama(toy, device)
        n_base = sum(p.numel() for p in model.parameters())
        if arm == "lope":
            wrapped = get_peft_model(model, LoPEConfig(r=4, target_modules=TARGETS))
            params = wrapped.set_stage("stage2")
        else:
            try:
                from peft import LoraConfig
                from peft import get_peft_model as peft_get_peft_model
            except ImportError:
                print("  peft_lora: skipped (peft, the `peers` extra, is not installed)")
                rows.append({"arm": arm, "skipped": "peft not installed"})
                continue
            cfg = LoraConfig(r=4, lora_alpha=32, lora_dropout=0.05, target_modules=TARGETS)
            wrapped = peft_get_peft_model(model, cfg)
            params = [p for p in wrapped.parameters() if p.requires_grad]
        wrapped.train()
        opt = torch.optim.AdamW(params, lr=1e-4)
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=gen).to(device)

        def step(wrapped=wrapped, opt=opt, ids=ids):
            opt.zero_grad(set_to_none=True)
            loss = wrapped(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            return loss

        loss = float(step().detach())
        row = {
            "arm": arm,
            "base_params": n_base,
            "trainable_params": sum(p.numel() for p in params),
            "tokens": batch * length,
            "loss": loss,
            "step_ms": _time(step, toy),
        }
        if device.type == "cuda":
            row["peak_MiB"] = peak_memory_cuda(step) / 2**20
        rows.append(row)
        print(
            "  "
            + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
            )
        )
        del wrapped, model, opt, params
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--toy", action="store_true", help="tiny shapes (CPU interpreter without a GPU)"
    )
    parser.add_argument("--out", default="lope-gpu.json", help="JSON output path")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.toy:
        print("no CUDA GPU: run with --toy (Triton interpreter) or on a GPU machine")
        return 2
    print(f"lope GPU benchmark on {device} ({'toy' if args.toy else 'full'} shapes)")
    start = time.perf_counter()
    print("1. correctness vs the float64 per-expert loop (fwd, bwd)")
    checks = correctness(device, args.toy)
    print("2. expert_mix time (ms): Triton vs torch single GEMM vs per-expert loop")
    timings = speed(device, args.toy)
    print("3. one training step of a random Llama: LoPE (Stage II) vs peft LoRA")
    steps = model_step(device, args.toy)
    result = {
        "env": environment(),
        "device": str(device),
        "toy": args.toy,
        "correctness": checks,
        "speed": timings,
        "model_step": steps,
        "seconds": time.perf_counter() - start,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out} ({result['seconds']:.1f} s)")
    return 0 if all(r["ok"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
