"""AnDPro on a GPU: correctness in bf16/fp32 vs float64, then scorer + selection latency at 8B-like shapes.

    python packages/andpro/benchmarks/gpu.py            # CUDA: H_q=32, H_kv=8, d=128, L=4k..32k, bf16
    python packages/andpro/benchmarks/gpu.py --toy      # tiny shapes, runs anywhere (CPU included)

For each length it times, per layer: AnDPro score + select (adaptive, chunks of 4), the
attention-only ablation, SnapKV (w=32, max-pool 7, uniform) and, as the reference cost, causal SDPA
prefill attention of that layer; then one decode step on the compressed (masked, padded) cache vs
the full cache, and the cache bytes. Prints a table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from andpro import AnDProScorer, AttentionScorer, Press, SnapKVScorer, scoring
from andpro.attention import masked_attention
from andpro.cache import PressLayer


def timed(fn, device, repeats=10, warmup=3) -> float:
    """Median seconds of ``fn`` (CUDA events on GPU, perf_counter on CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def correctness(device, dtype, hq, hkv, d, length, w) -> dict:
    """Relative error of the AnDPro token scores and window attention in ``dtype`` vs float64."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(1, hq, w, d, generator=g).to(device)
    k = torch.randn(1, hkv, length, d, generator=g).to(device)
    v = torch.randn(1, hkv, length, d, generator=g).to(device)
    ref_ctx = dict(queries=q.double(), keys=k.double(), values=v.double())
    low_ctx = dict(queries=q.to(dtype), keys=k.to(dtype), values=v.to(dtype))
    out = {}
    for name, fn in (
        ("window_attention", lambda c: scoring.window_attention(c["queries"], c["keys"])),
        (
            "andpro_scores",
            lambda c: scoring.andpro_scores(
                scoring.pool(scoring.window_attention(c["queries"], c["keys"]), 7, "max"),
                c["values"],
                scoring.candidate_mask(length, 4, w, device),
                gqa_reduce="sum",
            ),
        ),
    ):
        ref, low = fn(ref_ctx), fn(low_ctx).double()
        out[name] = float((low - ref).norm() / ref.norm())
    return out


def bench_length(device, dtype, hq, hkv, d, length, w, budget) -> dict:
    g = torch.Generator(device="cpu").manual_seed(1)
    q = torch.randn(1, hq, length, d, generator=g).to(device, dtype)
    k = torch.randn(1, hkv, length, d, generator=g).to(device, dtype)
    v = torch.randn(1, hkv, length, d, generator=g).to(device, dtype)
    qw = q[:, :, -w:]
    presses = {
        "andpro": Press(AnDProScorer(), budget, window=w),
        "attention": Press(AttentionScorer(), budget, window=w),
        "snapkv": Press(
            SnapKVScorer(pooling="max"), budget, window=w, chunk_size=1, head_budget="uniform"
        ),
    }
    row = {"L": length, "budget": budget}
    for name, press in presses.items():
        row[f"{name}_s"] = timed(lambda p=press: p.keep_mask(qw, k, v), device)
    row["prefill_sdpa_s"] = timed(
        lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True
        ),
        device,
        repeats=5,
    )
    # decode step: compressed (padded + masked) cache vs the full cache
    keep = presses["andpro"].keep_mask(qw, k, v)
    layer = PressLayer()
    layer.update(k, v)
    layer.compress(keep)
    q1 = q[:, :, -1:]
    allowed = layer.valid[:, :, None, :]
    row["decode_compressed_s"] = timed(
        lambda: masked_attention(q1, layer.keys, layer.values, allowed, d**-0.5), device
    )
    full_allowed = torch.ones(1, hkv, 1, length, dtype=torch.bool, device=device)
    row["decode_full_s"] = timed(lambda: masked_attention(q1, k, v, full_allowed, d**-0.5), device)
    row["cache_bytes_compressed"] = 2 * layer.keys.numel() * layer.keys.element_size()
    row["cache_bytes_full"] = 2 * k.numel() * k.element_size()
    row["physical_over_budget"] = layer.keys.shape[2] / budget
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        presses["andpro"].keep_mask(qw, k, v)
        row["andpro_peak_bytes"] = torch.cuda.max_memory_allocated()
    row["andpro_over_prefill"] = row["andpro_s"] / row["prefill_sdpa_s"]
    row["andpro_over_snapkv"] = row["andpro_s"] / row["snapkv_s"]
    return row


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny shapes (CPU-friendly smoke run)")
    parser.add_argument("--out", default="andpro_gpu.json", help="JSON output path")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.toy:
        hq, hkv, d, w, lengths, budget, dtypes = 4, 2, 16, 8, (96, 160), 48, (torch.float32,)
    else:
        hq, hkv, d, w, lengths, budget = 32, 8, 128, 32, (4096, 8192, 16384, 32768), 1024
        dtypes = (torch.bfloat16, torch.float32) if device.type == "cuda" else (torch.float32,)
    report = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "toy": args.toy,
        "shapes": dict(H_q=hq, H_kv=hkv, d=d, window=w),
        "correctness": {},
        "timings": [],
    }
    for dtype in dtypes:
        report["correctness"][str(dtype)] = correctness(device, dtype, hq, hkv, d, min(lengths), w)
    run_dtype = dtypes[0]
    for length in lengths:
        report["timings"].append(
            bench_length(device, run_dtype, hq, hkv, d, length, w, min(budget, length // 2))
        )
    print(f"device={report['device']} dtype={run_dtype} {report['shapes']}")
    print("correctness (rel. err vs float64):", json.dumps(report["correctness"]))
    cols = [
        "L",
        "andpro_s",
        "attention_s",
        "snapkv_s",
        "prefill_sdpa_s",
        "andpro_over_prefill",
        "andpro_over_snapkv",
        "decode_compressed_s",
        "decode_full_s",
    ]
    print(" | ".join(cols))
    for r in report["timings"]:
        print(" | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
