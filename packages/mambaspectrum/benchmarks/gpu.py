"""GPU measurements for mambaspectrum: correctness vs the float64 reference, then timings.

Times the forward Triton scan and the chunked torch scan against HF's slow path, mambapy and
mamba-ssm's CUDA kernel (each when importable) at L = 16K and 64K on a mamba-130m-shaped layer
(d_inner 1536, N 16), each checked against the float64 reference first, then one 30-iteration SPSA
calibration of a random mamba-130m-shaped model at 16K (mixers patched with ``backend="auto"``:
Triton on CUDA). ``--toy`` runs the same at tiny shapes (Triton under TRITON_INTERPRET=1 on CPU).

    python packages/mambaspectrum/benchmarks/gpu.py            # on a GPU
    python packages/mambaspectrum/benchmarks/gpu.py --toy      # tiny shapes, any device (tested on CPU)
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F


def main(argv=None) -> dict:
    from mambaspectrum import (
        Scaler,
        calibrate_spsa,
        patch_fast_forward,
        selective_scan,
        selective_scan_ref,
    )
    from transformers import MambaConfig, MambaForCausalLM
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    parser = argparse.ArgumentParser()
    parser.add_argument("--toy", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() and not args.toy else "cpu"
    d_inner, n = (16, 4) if args.toy else (1536, 16)
    lengths = [64, 96] if args.toy else [16384, 65536]
    report = {"device": device, "scan": [], "calibration": None}
    g = torch.Generator().manual_seed(0)
    for length in lengths:
        u = torch.randn(1, d_inner, length, generator=g).to(device)
        delta = F.softplus(torch.randn(1, d_inner, length, generator=g) - 3).to(device)
        A = -torch.exp(torch.randn(d_inner, n, generator=g)).to(device)
        B = torch.randn(1, n, length, generator=g).to(device)
        C = torch.randn(1, n, length, generator=g).to(device)
        ref_len = min(length, 4096)
        ref = selective_scan_ref(
            u[..., :ref_len], delta[..., :ref_len], A, B[..., :ref_len], C[..., :ref_len]
        )
        row = {"L": length}
        xs = (u, delta, A, B, C)
        fns = {"chunked": lambda xs=xs: selective_scan(*xs, backend="chunked")}
        if length <= 16384 or args.toy:
            fns["hf_slow"] = lambda xs=xs: mamba_selective_scan(*xs)
        try:
            import mambapy.pscan  # noqa: F401

            fns["mambapy"] = lambda xs=xs: mamba_selective_scan(*xs, use_mambapy=True)
        except ImportError:
            row["mambapy"] = "not installed"
        from neurips25_core.device import triton_usable

        if triton_usable() and (device == "cuda" or args.toy):
            fns["triton"] = lambda xs=xs: selective_scan(*xs, backend="triton")
        try:
            from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

            if device == "cuda":
                fns["mamba_ssm"] = lambda xs=xs: selective_scan_fn(*xs)
        except ImportError:
            row["mamba_ssm"] = "not installed"
        for name, fn in fns.items():
            with torch.no_grad():
                y = fn()
                row[f"{name}_max_err_vs_reference"] = float(
                    (y[..., :ref_len].double() - ref.double()).abs().max()
                )
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                if device == "cuda":
                    torch.cuda.synchronize()
                row[f"{name}_s"] = time.perf_counter() - t0
        report["scan"].append(row)
    hidden, layers, length, iters = (16, 2, 64, 2) if args.toy else (768, 24, 16384, 30)
    torch.manual_seed(0)
    model = MambaForCausalLM(
        MambaConfig(vocab_size=256, hidden_size=hidden, num_hidden_layers=layers, state_size=16)
    )
    model = patch_fast_forward(model.to(device).eval(), backend="auto")
    ids = torch.randint(0, 256, (1, length), device=device)
    t0 = time.perf_counter()
    res = calibrate_spsa(model, ids, Scaler(model, mode="spectrum"), iters=iters)
    report["calibration"] = {
        "L": length,
        "iters": iters,
        "seconds": time.perf_counter() - t0,
        "loss": res.loss,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
