"""GPU benchmark for tfla: correctness, then the paper's constant-token timing (TFLA §6).

Run on a CUDA machine from the repository root::

    uv run python packages/tfla/benchmarks/gpu.py --out packages/tfla/results/gpu

1. Correctness of the Triton kernels (float32 with IEEE dots, and bfloat16) against the float64 torch
   chunkwise path (itself exact against the recurrent reference), forward and backward, at
   S = 2048 and 8192.
2. Constant tokens (65,536 per batch: S = 512 ... 65,536 with B = 65,536 / S), NH = 16, Dqk = 128,
   Dv = 256, bfloat16: mLSTMexp and mLSTMsig TFLA kernels at chunk sizes 64/128/256, the same
   kernel with one tile per chunk (limit-chunk, chunk 64), torch SDPA causal attention
   (32 heads x 128, FlashAttention backend where available) and our torch chunkwise path;
   forward and forward+backward medians from ``triton.testing.do_bench`` and peak memory from
   ``torch.cuda.max_memory_allocated``. The first call of each configuration (JIT compile) is a
   warm-up outside the timing.

``--toy`` runs tiny shapes; without a GPU it runs the Triton kernels under ``TRITON_INTERPRET=1``
on CPU tensors (timings then mean nothing; the test suite uses it to check the script works).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _inputs(B, H, S, Dk, Dv, dtype, device, seed=0, requires_grad=True):
    """Seeded N(0,1) inputs drawn on the device (f shifted by +3: forget gates near 0.95)."""
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(B, H, S, Dk, generator=g, device=device)
    k = torch.randn(B, H, S, Dk, generator=g, device=device)
    v = torch.randn(B, H, S, Dv, generator=g, device=device)
    i = torch.randn(B, H, S, generator=g, device=device)
    f = torch.randn(B, H, S, generator=g, device=device) + 3.0
    return [x.to(dtype=dtype).requires_grad_(requires_grad) for x in (q, k, v, i, f)]


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def correctness(lengths, H, Dk, Dv, chunk, device, log):
    from tfla.chunkwise import mlstm_chunkwise
    from tfla.kernels import mlstm_triton

    rows = []
    for variant in ("exp", "sig"):
        for S in lengths:
            for dtype in (torch.float32, torch.bfloat16):
                xs = _inputs(1, H, S, Dk, Dv, dtype, device)
                # The reference sees the same (rounded) inputs, so only the kernel's error is measured.
                ref_in = [x.detach().double().requires_grad_() for x in xs]
                h_ref = mlstm_chunkwise(*ref_in, variant=variant, chunk_size=chunk)
                g = torch.randn(
                    h_ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64
                ).to(device)
                grads_ref = torch.autograd.grad(h_ref, ref_in, g)
                h = mlstm_triton(*xs, variant=variant, chunk_size=chunk)
                grads = torch.autograd.grad(h, xs, g.to(dtype))
                row = dict(
                    variant=variant, S=S, dtype=str(dtype).replace("torch.", ""), h=_rel(h, h_ref)
                )
                row.update({f"d{n}": _rel(a, b) for n, a, b in zip("qkvif", grads, grads_ref)})
                rows.append(row)
                log(
                    f"  correctness {variant} S={S} {row['dtype']}: "
                    + ", ".join(f"{k} {v:.1e}" for k, v in row.items() if isinstance(v, float))
                )
    return rows


def _bench(fn, device):
    if device == "cuda":
        import triton.testing

        fn()  # JIT compile outside the timing
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        return ms, peak
    t0 = time.perf_counter()  # toy run on CPU: one call, only to check the script works
    fn()
    return (time.perf_counter() - t0) * 1e3, float("nan")


def constant_tokens(
    tokens, lengths, H, Dk, Dv, chunks, att_heads, att_dim, device, dtype, log, torch_max_tokens
):
    from tfla.chunkwise import mlstm_chunkwise
    from tfla.kernels import mlstm_triton

    rows = []
    for S in lengths:
        B = max(1, tokens // S)
        kernels = {}
        for variant in ("exp", "sig"):
            for L in chunks:
                if L > S:
                    continue
                kernels[f"mLSTM{variant} TFLA cs{L}"] = (variant, dict(chunk_size=L))
        kernels["mLSTMexp limit_chunk cs64"] = (
            "exp",
            dict(chunk_size=min(64, S), block_lq=min(64, S), block_lkv=min(64, S)),
        )
        for name, (variant, kw) in kernels.items():
            xs = _inputs(B, H, S, Dk, Dv, dtype, device)
            norm = variant == "exp"
            for mode in ("fw", "fwbw"):
                if mode == "fw":

                    def fn(xs=xs, variant=variant, kw=kw, norm=norm):
                        with torch.no_grad():
                            mlstm_triton(*xs, variant=variant, normalize=norm, **kw)
                else:

                    def fn(xs=xs, variant=variant, kw=kw, norm=norm):
                        mlstm_triton(*xs, variant=variant, normalize=norm, **kw).sum().backward()

                ms, mem = _bench(fn, device)
                rows.append(dict(kernel=name, S=S, B=B, mode=mode, ms=ms, peak_gib=mem))
                log(f"  {name:28s} S={S:6d} B={B:4d} {mode:5s} {ms:9.2f} ms  {mem:6.2f} GiB")
            del xs
        # Baseline: causal attention through torch SDPA (FlashAttention backend on GPU).
        q = torch.randn(B, att_heads, S, att_dim, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn_like(q, requires_grad=True)
        v = torch.randn_like(q, requires_grad=True)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        for mode in ("fw", "fwbw"):
            if mode == "fw":

                def fn(q=q, k=k, v=v, sdpa=sdpa):
                    with torch.no_grad():
                        sdpa(q, k, v, is_causal=True)
            else:

                def fn(q=q, k=k, v=v, sdpa=sdpa):
                    sdpa(q, k, v, is_causal=True).sum().backward()

            ms, mem = _bench(fn, device)
            rows.append(dict(kernel="torch SDPA causal", S=S, B=B, mode=mode, ms=ms, peak_gib=mem))
            log(
                f"  {'torch SDPA causal':28s} S={S:6d} B={B:4d} {mode:5s} {ms:9.2f} ms  {mem:6.2f} GiB"
            )
        del q, k, v
        # Our torch chunkwise path (float32 compute), on fewer tokens where memory would not fit.
        if torch_max_tokens >= B * S:
            xs = _inputs(B, H, S, Dk, Dv, dtype, device)
            for mode in ("fw", "fwbw"):
                if mode == "fw":

                    def fn(xs=xs):
                        with torch.no_grad():
                            mlstm_chunkwise(*xs, chunk_size=64)
                else:

                    def fn(xs=xs):
                        mlstm_chunkwise(*xs, chunk_size=64).sum().backward()

                ms, mem = _bench(fn, device)
                rows.append(
                    dict(
                        kernel="mLSTMexp torch chunkwise cs64",
                        S=S,
                        B=B,
                        mode=mode,
                        ms=ms,
                        peak_gib=mem,
                    )
                )
                log(
                    f"  {'mLSTMexp torch chunkwise cs64':28s} S={S:6d} B={B:4d} {mode:5s} {ms:9.2f} ms  {mem:6.2f} GiB"
                )
            del xs
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--toy",
        action="store_true",
        help="tiny shapes (runs under the Triton interpreter without a GPU)",
    )
    p.add_argument("--out", default="tfla-gpu-out", help="output directory for gpu.json")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    log = print
    if args.toy:
        cfg = dict(
            corr_lengths=[40],
            H=2,
            Dk=16,
            Dv=32,
            chunk=16,
            tokens=64,
            lengths=[32],
            chunks=[16, 32],
            att_heads=2,
            att_dim=16,
            torch_max_tokens=1 << 30,
        )
    else:
        if device != "cuda":
            raise SystemExit(
                "gpu.py: no CUDA device; use --toy to check the script under the interpreter"
            )
        cfg = dict(
            corr_lengths=[2048, 8192],
            H=16,
            Dk=128,
            Dv=256,
            chunk=128,
            tokens=65536,
            lengths=[512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
            chunks=[64, 128, 256],
            att_heads=32,
            att_dim=128,
            torch_max_tokens=16384,
        )
    info = dict(
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu (TRITON_INTERPRET=1)",
        torch=torch.__version__,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        toy=args.toy,
        config=cfg,
    )
    log(f"tfla gpu benchmark on {info['device']} ({'toy' if args.toy else 'paper shapes'})")
    corr = correctness(
        cfg["corr_lengths"], cfg["H"], cfg["Dk"], cfg["Dv"], cfg["chunk"], device, log
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    speed = constant_tokens(
        cfg["tokens"],
        cfg["lengths"],
        cfg["H"],
        cfg["Dk"],
        cfg["Dv"],
        cfg["chunks"],
        cfg["att_heads"],
        cfg["att_dim"],
        device,
        dtype,
        log,
        cfg["torch_max_tokens"],
    )
    result = dict(info=info, correctness=corr, constant_tokens=speed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(
        json.dumps(
            result,
            indent=2,
            default=lambda x: None if isinstance(x, float) and math.isnan(x) else x,
        )
    )
    # A compact table: kernels x S for fwbw.
    lengths = sorted({r["S"] for r in speed})
    names = list(dict.fromkeys(r["kernel"] for r in speed))
    lines = [
        "| kernel (fwbw ms) | " + " | ".join(str(s) for s in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for n in names:
        cells = []
        for s in lengths:
            hit = [r for r in speed if r["kernel"] == n and r["S"] == s and r["mode"] == "fwbw"]
            cells.append(f"{hit[0]['ms']:.2f}" if hit else "")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    (out / "gpu.md").write_text(
        f"# tfla GPU benchmark ({info['device']}, {info['date']})\n\n{table}\n"
    )
    log(table)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
