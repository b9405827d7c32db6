"""GPU benchmark for qpalette: Triton dequant-GEMV kernels against cuBLAS fp16 and torchao int4.

Run on a CUDA machine from the repository root (under 5 minutes on one H200)::

    uv run --package qpalette --extra peers python packages/qpalette/benchmarks/gpu.py --out gpu.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU; the tests
do this so the script is known to work). Random codes (any word stream is a valid TCQ code).
Sections:

1. correctness: every kernel against dequantize-then-matmul (relative error <= 1e-4);
2. time (µs) and effective bandwidth (GB/s of stored bytes) at batch 1/4/8 on (N, K) in
   {(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)} for TCQ 2/3/4, half-TCQ 3.25,
   NUQ-4 and VQ-3, against cuBLAS fp16, dequantize-then-matmul and torchao int4 (when installed);
3. fused vs unfused q/k/v (4096 + 1024 + 1024 outputs, one kernel vs three);
4. the Triton ``fwht`` (input Hadamard rotation) against the torch stages at batch 1/4/8 and
   d in {4096, 14336 = 2**11 * 7}: relative error, then µs.

Official RTX 4090 (batch 1): 4096² TCQ-3 10.5 µs, NUQ-4 13.0 µs; fused qkv 19.2 vs 23.8 µs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from qpalette.bench import random_quantized
from qpalette.ops import qmatmul
from qpalette.quantizers import QuantizedMatrix, storage_bytes
from qpalette.rotation import hadamard_transform, random_signs

from neurips25_core.bench import environment, time_fn
from neurips25_core.testing import relative_error

SPECS = ["tcq-2", "tcq-3", "tcq-4", "tcq-3.25", "nuq-4", "vq-3"]


def _move(qm: QuantizedMatrix, device) -> QuantizedMatrix:
    return QuantizedMatrix(
        qm.spec, qm.shape, qm.scales.to(device), tuple(c.to(device) for c in qm.codes),
        qm.codebook.to(device),
    )  # fmt: skip


def _torchao_int4(w: torch.Tensor):
    try:
        from torchao.quantization import Int4WeightOnlyConfig, quantize_
    except ImportError:
        return None
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=torch.bfloat16, device=w.device)
    lin.weight.data.copy_(w.to(torch.bfloat16))
    try:
        quantize_(lin, Int4WeightOnlyConfig(group_size=128))
    except Exception as e:  # the int4 kernels need a supported GPU
        print(f"torchao int4 unavailable: {e}", file=sys.stderr)
        return None
    return lin


def run(toy: bool) -> dict:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shapes = [(64, 256)] if toy else [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
    batches = [1] if toy else [1, 4, 8]
    specs = ["tcq-3.25", "vq-3"] if toy else SPECS
    out = {"environment": environment(), "toy": toy, "correctness": [], "timing": [], "fused": []}
    tkw = dict(warmup=0, repeats=1) if toy else dict(warmup=5, min_time=0.2)
    for n, k in shapes:
        qms = {s: _move(random_quantized(s, (n, k), seed=1), dev) for s in specs}
        w16 = qms[specs[0]].dequantize().to(torch.float16)
        ao = None if toy or dev.type != "cuda" else _torchao_int4(w16.float())
        for m in batches:
            x = torch.randn(m, k, device=dev)
            xh = x.half()
            row = {"n": n, "k": k, "batch": m}
            if dev.type == "cuda":
                row["cublas_fp16_us"] = (
                    time_fn(lambda xh=xh, w16=w16: xh @ w16.T, **tkw).median * 1e6
                )
                if ao is not None:
                    xb = x.to(torch.bfloat16)
                    row["torchao_int4_us"] = (
                        time_fn(lambda ao=ao, xb=xb: ao(xb), **tkw).median * 1e6
                    )
            for s, qm in qms.items():
                ref = x @ qm.dequantize().T
                got = qmatmul(x, qm, backend="triton")
                err = relative_error(got, ref)
                out["correctness"].append({"spec": s, "n": n, "k": k, "batch": m, "rel_err": err})
                if err > 1e-4:
                    raise AssertionError(f"{s} ({n}, {k}) batch {m}: relative error {err:.2e}")
                t = time_fn(lambda qm=qm, x=x: qmatmul(x, qm, backend="triton"), **tkw).median
                td = time_fn(lambda qm=qm, x=x: x @ qm.dequantize().T, **tkw).median
                nbytes = storage_bytes(qm.spec, (n, k)) + 2 * n
                row[f"{s}_us"] = t * 1e6
                row[f"{s}_GBps"] = nbytes / t / 1e9
                row[f"{s}_dequant_matmul_us"] = td * 1e6
            out["timing"].append(row)
            print(json.dumps(row), flush=True)
    # fused vs unfused qkv
    ks = 256 if toy else 4096
    outs = (64, 16, 16) if toy else (4096, 1024, 1024)
    for s in ["tcq-3"] if toy else ["tcq-3", "nuq-4"]:
        parts = [_move(random_quantized(s, (o, ks), seed=i), dev) for i, o in enumerate(outs)]
        fused = QuantizedMatrix(
            parts[0].spec, (sum(outs), ks), torch.cat([p.scales for p in parts]),
            tuple(torch.cat([p.codes[i] for p in parts]) for i in range(len(parts[0].codes))),
            parts[0].codebook,
        )  # fmt: skip
        x = torch.randn(1, ks, device=dev)
        ref = torch.cat([qmatmul(x, p, backend="triton") for p in parts], dim=-1)
        err = relative_error(qmatmul(x, fused, backend="triton"), ref)
        if err > 1e-5:
            raise AssertionError(f"fused {s}: relative error {err:.2e}")
        tf = time_fn(lambda f=fused, x=x: qmatmul(x, f, backend="triton"), **tkw).median
        tu = time_fn(
            lambda ps=parts, x=x: [qmatmul(x, p, backend="triton") for p in ps], **tkw
        ).median
        rec = {"spec": s, "fused_us": tf * 1e6, "unfused_us": tu * 1e6, "rel_err": err}
        out["fused"].append(rec)
        print(json.dumps(rec), flush=True)
    # the input rotation: Triton fwht vs the torch stages
    out["fwht"] = []
    for d in [64, 48] if toy else [4096, 14336]:
        sg = random_signs(d, seed=3).to(dev)
        for m in batches:
            x = torch.randn(m, d, device=dev)
            ref = hadamard_transform(x.double(), sg.double(), backend="torch")
            got = hadamard_transform(x, sg, backend="triton")
            err = relative_error(got, ref)
            if err > 1e-5:
                raise AssertionError(f"fwht d={d} batch {m}: relative error {err:.2e}")
            rec = {"d": d, "batch": m, "rel_err": err}
            for be in ("triton", "torch"):
                rec[f"{be}_us"] = (
                    time_fn(
                        lambda x=x, be=be, sg=sg: hadamard_transform(x, sg, backend=be), **tkw
                    ).median
                    * 1e6
                )
            out["fwht"].append(rec)
            print(json.dumps(rec), flush=True)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--toy", action="store_true", help="tiny shapes (interpreter without a GPU)")
    p.add_argument("--out", default=None, help="write the JSON here")
    args = p.parse_args(argv)
    res = run(args.toy)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
