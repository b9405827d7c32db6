"""GPU benchmark for xecomla (so far: the absorbed-MLA decode kernel only).

Run on a CUDA machine from the repository root::

    uv run python packages/xecomla/benchmarks/gpu.py --out gpu-results.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU; the tests do
this so the script is known to work). What it measures now:

1. correctness: ``ops.mla_decode`` Triton (fp32 out) and torch vs the float64 reference on the 8B
   MLA shapes (32 heads, r_kv 160, d_rope 64), bf16 and fp32 caches;
2. one-token absorbed decode time, Triton vs torch (bf16 cache), over context length and batch.

Not built yet (issue 30): random bf16 Llama-3.1-8B-shaped models — GQA vs MambaInLlama-50 % vs
8 MLA + 24 Mamba2 — with the largest batch that fits and decode tokens/s at 4K/16K/32K.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from xecomla.ops import mla_decode

from neurips25_core.bench import environment, time_fn
from neurips25_core.testing import relative_error


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--toy", action="store_true", help="tiny shapes (CPU interpreter when no GPU)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.toy:
        heads, r_kv, d_rope, lengths, batches = 3, 12, 4, [37], [2]
    else:
        heads, r_kv, d_rope, lengths, batches = 32, 160, 64, [4096, 16384, 32768], [1, 16]
    scale = (64 + d_rope) ** -0.5
    g = torch.Generator(device="cpu").manual_seed(0)
    result = {"environment": environment(), "device": device, "correctness": [], "speed": []}
    for dtype in (torch.float32, torch.bfloat16):
        B, S = batches[0], lengths[0]
        q = torch.randn(B, heads, r_kv, generator=g).to(device, dtype)
        qpe = torch.randn(B, heads, d_rope, generator=g).to(device, dtype)
        c = torch.randn(B, S, r_kv, generator=g).to(device, dtype)
        k = torch.randn(B, S, d_rope, generator=g).to(device, dtype)
        ref = mla_decode(q, qpe, c, k, scale, backend="reference")
        for backend in ("triton", "torch"):
            err = relative_error(
                mla_decode(q.float(), qpe.float(), c.float(), k.float(), scale, backend=backend),
                ref,
            )
            ok = err <= 1e-5
            result["correctness"].append(
                dict(backend=backend, dtype=str(dtype), S=S, rel_err=err, ok=ok)
            )
            print(f"correctness {backend:6s} {dtype}: rel err {err:.2e} {'ok' if ok else 'FAIL'}")
    for B in batches:
        for S in lengths:
            q = torch.randn(B, heads, r_kv, device=device, dtype=torch.bfloat16)
            qpe = torch.randn(B, heads, d_rope, device=device, dtype=torch.bfloat16)
            c = torch.randn(B, S, r_kv, device=device, dtype=torch.bfloat16)
            k = torch.randn(B, S, d_rope, device=device, dtype=torch.bfloat16)
            row = dict(B=B, S=S, heads=heads, r_kv=r_kv, d_rope=d_rope)
            for backend in ("triton", "torch"):
                t = time_fn(
                    lambda b=backend, args=(q, qpe, c, k): mla_decode(*args, scale, backend=b),
                    min_time=0.05 if args.toy else 0.5,
                )
                row[f"{backend}_ms"] = t.median * 1e3
            result["speed"].append(row)
            print(
                f"decode B={B} S={S}: triton {row['triton_ms']:.3f} ms, torch {row['torch_ms']:.3f} ms"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
