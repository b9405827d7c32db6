"""GPU benchmark of sinkgd: kernel correctness, kernel bandwidth, optimizer step time, memory.

Run on a CUDA machine from the repository root::

    uv run python packages/sinkgd/benchmarks/gpu.py --out packages/sinkgd/results/gpu.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU: set
``TRITON_INTERPRET=1``); a test runs it so that the script is known to work before a GPU is used.

Sections:
  (a) correctness of the fused Triton SR-Sinkhorn against the float64 reference and the torch path,
      fp32 and bf16 input, at 4096×11008 (LLaMA-7B MLP) and the 1B MLP shape;
  (b) SR-Sinkhorn time, Triton vs torch eager vs torch.compile, at L = 1 and 5, and the kernel's
      effective bandwidth (bytes of (2L+1) reads and one write) against the measured copy roofline;
  (c) optimizer step time on one 1B decoder layer's matrices: SinkGD (L=1/5, Triton and torch),
      SWAN, against AdamW(fused=True) and torch.optim.Muon;
  (d) peak memory (``torch.cuda.max_memory_allocated``) of training steps on GaLore 60M/130M shapes
      with AdamW, SinkGD+AdamW and SGD (GPU only).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import sinkgd
import torch
from sinkgd import reference

from neurips25_core.bench import environment, peak_memory_cuda, roofline, time_fn
from neurips25_core.testing import relative_error


def _rows_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    for r in rows[1:]:
        keys += [k for k in r if k not in keys]
    lines = [" | ".join(keys), " | ".join("---" for _ in keys)]
    for r in rows:
        lines.append(
            " | ".join(
                f"{r.get(k):.4g}" if isinstance(r.get(k), float) else str(r.get(k, ""))
                for k in keys
            )
        )
    return "\n".join(lines)


def correctness(device: str, toy: bool) -> list[dict]:
    shapes = [(1, 24, 40), (2, 17, 33)] if toy else [(1, 4096, 11008), (1, 2048, 5461)]
    rows = []
    for shape in shapes:
        g32 = torch.randn(*shape, device=device, generator=torch.Generator(device).manual_seed(0))
        ref = torch.stack([reference.sr_sinkhorn(x.double(), 5) for x in g32])
        for dtype in (torch.float32, torch.bfloat16):
            g = g32.to(dtype)
            ref_d = (
                ref
                if dtype == torch.float32
                else torch.stack([reference.sr_sinkhorn(x.double(), 5) for x in g])
            )
            tri = sinkgd.sr_sinkhorn(g, 5, backend="triton")
            tor = sinkgd.sr_sinkhorn(g, 5, backend="torch")
            rows.append(
                {
                    "shape": "x".join(map(str, shape)),
                    "dtype": str(dtype).split(".")[-1],
                    "triton_vs_fp64": relative_error(tri.float(), ref_d.float()),
                    "torch_vs_fp64": relative_error(tor.float(), ref_d.float()),
                    "triton_vs_torch": relative_error(tri.float(), tor.float()),
                }
            )
    return rows


def kernel_speed(device: str, toy: bool, bandwidth: float | None) -> list[dict]:
    shapes = [(1, 24, 40)] if toy else [(1, 4096, 11008), (1, 2048, 5461)]
    warmup, repeats = (0, 1) if toy else (3, None)
    rows = []
    for shape in shapes:
        for dtype in (torch.float32,) if toy else (torch.float32, torch.bfloat16):
            g = torch.randn(*shape, device=device).to(dtype)
            for num_iters in (1, 5):
                t_tri = time_fn(
                    lambda g=g, n=num_iters: sinkgd.sr_sinkhorn(g, n, backend="triton"),
                    warmup=warmup,
                    repeats=repeats,
                ).median
                t_tor = time_fn(
                    lambda g=g, n=num_iters: sinkgd.sr_sinkhorn(g, n, backend="torch"),
                    warmup=warmup,
                    repeats=repeats,
                ).median
                row = {
                    "shape": "x".join(map(str, shape)),
                    "dtype": str(dtype).split(".")[-1],
                    "L": num_iters,
                    "triton_ms": t_tri * 1e3,
                    "torch_ms": t_tor * 1e3,
                    "speedup_vs_torch": t_tor / t_tri,
                }
                if not toy and device == "cuda":
                    from sinkgd.sinkhorn import sr_sinkhorn_torch

                    compiled = torch.compile(sr_sinkhorn_torch, fullgraph=True, dynamic=False)
                    t_cmp = time_fn(
                        lambda f=compiled, g=g, n=num_iters: f(g, n, 1e-8), warmup=3
                    ).median
                    row["compiled_ms"] = t_cmp * 1e3
                moved = (
                    g.numel() * g.element_size() * (2 * num_iters + 1)
                    + g.numel() * g.element_size()
                )
                row["triton_GBps"] = moved / t_tri / 1e9
                if bandwidth:
                    row["fraction_of_copy_bw"] = moved / t_tri / bandwidth
                rows.append(row)
    return rows


def _layer_params(
    hidden: int, inter: int, device: str, dtype: torch.dtype
) -> list[torch.nn.Parameter]:
    shapes = [(hidden, hidden)] * 4 + [(inter, hidden), (inter, hidden), (hidden, inter)]
    params = []
    for s in shapes:
        p = torch.nn.Parameter(torch.randn(*s, device=device, dtype=dtype) * 0.02)
        p.grad = torch.randn(*s, device=device, dtype=dtype)
        params.append(p)
    return params


def step_speed(device: str, toy: bool) -> list[dict]:
    hidden, inter = (32, 88) if toy else (2048, 5461)
    warmup, repeats = (0, 1) if toy else (3, None)
    rows = []
    for dtype in (torch.float32,) if toy else (torch.float32, torch.bfloat16):
        params = _layer_params(hidden, inter, device, dtype)
        fused = device == "cuda"
        opts = {
            "AdamW fused" if fused else "AdamW foreach": torch.optim.AdamW(
                params, lr=1e-6, fused=fused or None, foreach=None if fused else True
            ),
            "SinkGD L=5 triton": sinkgd.SinkGD(
                params, lr=1e-6, num_iters=5, backend="triton", foreach=True
            ),
            "SinkGD L=1 triton": sinkgd.SinkGD(
                params, lr=1e-6, num_iters=1, backend="triton", foreach=True
            ),
            "SinkGD L=5 torch": sinkgd.SinkGD(
                params, lr=1e-6, num_iters=5, backend="torch", foreach=False
            ),
            "SWAN": sinkgd.SWAN(params, lr=1e-6),
        }
        if hasattr(torch.optim, "Muon"):
            opts["torch Muon"] = torch.optim.Muon(params, lr=1e-6)
        base_name = next(iter(opts))
        times = {}
        for name, opt in opts.items():
            times[name] = time_fn(opt.step, warmup=warmup, repeats=repeats).median
        for name, t in times.items():
            rows.append(
                {
                    "layer": f"{hidden}x{inter}",
                    "dtype": str(dtype).split(".")[-1],
                    "optimizer": name,
                    "step_ms": t * 1e3,
                    f"speedup_vs_{base_name.replace(' ', '_')}": times[base_name] / t,
                }
            )
    return rows


def memory(device: str, toy: bool) -> list[dict]:
    if device != "cuda":
        return []
    from sinkgd.bench import GALORE_SHAPES, GALORE_VOCAB, make_optimizer
    from transformers import LlamaForCausalLM

    from neurips25_core.models import tiny_llama_config

    rows = []
    for size in ("60M",) if toy else ("60M", "130M", "350M"):
        hidden, inter, heads, layers = GALORE_SHAPES[size]
        cfg = tiny_llama_config(
            hidden_size=hidden,
            intermediate_size=inter,
            num_heads=heads,
            num_layers=layers,
            vocab_size=GALORE_VOCAB,
            max_position_embeddings=256,
        )
        for which in ("adamw", "sinkgd", "sgd"):
            model = LlamaForCausalLM(cfg).to(device, torch.bfloat16)
            opt = make_optimizer(which, model, 1e-3)
            x = torch.randint(0, GALORE_VOCAB, (8, 256), device=device)

            def step(model=model, opt=opt, x=x):
                for _ in range(2):
                    model(x, labels=x).loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)

            peak = peak_memory_cuda(step)
            rows.append(
                {
                    "model": size,
                    "optimizer": which,
                    "peak_GiB": peak / 2**30,
                    "state_GiB": sinkgd.optimizer_state_bytes(opt) / 2**30,
                }
            )
            del model, opt
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--toy",
        action="store_true",
        help="tiny shapes (CPU through the Triton interpreter without a GPU)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.toy:
        parser.error("no GPU here: run with --toy (and TRITON_INTERPRET=1) to check the script")
    bandwidth = (
        None if args.toy else roofline(device, matmul_size=4096, copy_bytes=1 << 30)["bandwidth"]
    )
    results = {
        "environment": environment(),
        "toy": args.toy,
        "copy_bandwidth_GBps": bandwidth / 1e9 if bandwidth else None,
        "correctness": correctness(device, args.toy),
        "kernel_speed": kernel_speed(device, args.toy, bandwidth),
        "step_speed": step_speed(device, args.toy),
        "memory": memory(device, args.toy),
    }
    for section in ("correctness", "kernel_speed", "step_speed", "memory"):
        if results[section]:
            print(f"\n## {section}\n")
            print(_rows_table(results[section]))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"\nwrote {args.out}")
    bad = [
        r
        for r in results["correctness"]
        if not (r["triton_vs_torch"] <= (1e-5 if r["dtype"] == "float32" else 1.6e-2))
    ]
    if bad:
        print(f"correctness FAILED: {bad}", file=sys.stderr)
    assert all(math.isfinite(r["triton_ms"]) for r in results["kernel_speed"])
    return results


if __name__ == "__main__":
    main()
