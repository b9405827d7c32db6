"""GPU benchmark for nanoadam: the Triton sparse Adam step against fused AdamW and the torch path.

Run on a CUDA machine from the repository root (about 3-4 minutes on one H200)::

    uv run python packages/nanoadam/benchmarks/gpu.py --out gpu-results.json

``--toy`` runs tiny shapes (on CPU through the Triton interpreter when there is no GPU; the tests
do this so the script is known to work). Sections:

1. correctness: on small odd shapes, fp32 and bf16 parameters (fp32 state), the Triton step and
   the torch step after 5 steps (a mask refresh in between) against the float64 dense masked
   Adam reference (:func:`nanoadam.masked_adam_reference`), and Triton against torch;
2. speed: the weights of 8 Llama-3-8B layers (4096² ×4 and 4096×14336 ×3 per layer, 1.95 G
   parameters), fp32 and bf16, k ∈ {0.01, 0.1}: one optimizer step of ``AdamW(fused=True)``,
   the NanoAdam Triton step and the NanoAdam torch step (ms, median of CUDA-event timings), the
   bytes each moves per step and the resulting GB/s, the mask refresh (ms; amortised over
   m = 100 in ``amortised_ms``), the peak extra memory of a step from a cold state, and the
   optimizer state bytes. The target is NanoAdam ≤ 1.3× AdamW's step time at k = 0.1.

Byte model per step (what the kernels must read and write): AdamW reads p, g, m, v and writes
p, m, v: 7 values of the parameter/state width per parameter (28 B in fp32). NanoAdam reads the
index, p[I], g[I], m, v, age and writes p[I], m, v, age per *selected* entry.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from nanoadam import NanoAdam, masked_adam_reference, sparse_adam_step_multi

from neurips25_core.bench import environment, peak_memory_cuda, time_fn
from neurips25_core.testing import default_rtol, relative_error

LLAMA3_8B_LAYER = [(4096, 4096)] * 4 + [(14336, 4096), (14336, 4096), (4096, 14336)]


def _shapes(toy: bool) -> list[tuple[int, int]]:
    if toy:
        return [(48, 40), (40, 96)] * 2
    return LLAMA3_8B_LAYER * 8


def _params(shapes, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = []
    for shape in shapes:
        p = torch.nn.Parameter((0.02 * torch.randn(shape, generator=g)).to(device, dtype))
        p.grad = (1e-3 * torch.randn(shape, generator=g)).to(device, dtype)
        ps.append(p)
    return ps


def _compact_step(opt: NanoAdam, backend: str) -> None:
    """One NanoAdam step on the current masks, through ``backend`` (no refresh).

    ``triton`` is the optimizer's CUDA path: every tensor in one multi-tensor launch.
    """
    group = opt.param_groups[0]
    b1, b2 = group["betas"]
    ps = group["params"]
    sts = [opt.state[p] for p in ps]
    sparse_adam_step_multi(
        ps,
        [p.grad for p in ps],
        [st["idx"] for st in sts],
        [st["exp_avg"] for st in sts],
        [st["exp_avg_sq"] for st in sts],
        [st["age"] for st in sts],
        lr=group["lr"],
        beta1=b1,
        beta2=b2,
        eps=group["eps"],
        weight_decay=group["weight_decay"],
        backend=backend,
    )


def correctness(device, toy: bool) -> list[dict]:
    """Triton and torch steps against the float64 masked reference, fp32 and bf16 params."""
    rows = []
    shapes = [(37, 29), (5, 1)] if toy else [(300, 257), (1000, 33), (5, 1)]
    steps, refresh_at = 5, 3
    for dtype in (torch.float32, torch.bfloat16):
        for shape in shapes:
            g = torch.Generator().manual_seed(shape[0])
            p0 = (0.02 * torch.randn(shape, generator=g)).to(dtype)
            grads = [(torch.randn(shape, generator=g) * 1e-2).to(dtype) for _ in range(steps)]
            # the interpreter emulates bf16 through numpy, which has no bf16: bf16 parameters are
            # checked on the Triton path on a GPU only
            backends = (
                ("torch",)
                if dtype == torch.bfloat16 and device.type == "cpu"
                else (
                    "triton",
                    "torch",
                )
            )
            outs, masks = {}, []
            for backend in backends:
                p = torch.nn.Parameter(p0.clone().to(device))
                opt = NanoAdam([p], lr=1e-2, density=0.1, mask_interval=None, chunk_size=256)
                masks = []
                for t in range(steps):
                    p.grad = grads[t].to(device)
                    if t == 0:
                        opt.refresh_masks()
                    if t == refresh_at:
                        opt.refresh_masks()  # the updated entries grew: the mask moves
                    masks.append(opt.mask(p).cpu())
                    _compact_step(opt, backend)
                outs[backend] = p.detach().float().cpu()
            ref = masked_adam_reference(p0.double(), [gr.double() for gr in grads], masks, lr=1e-2)
            # CONTRIBUTING's defaults against the float64 reference (fp32 1e-5, bf16 1.6e-2)
            tol = default_rtol(dtype)
            row = {
                "dtype": str(dtype).removeprefix("torch."),
                "shape": list(shape),
                "torch_vs_ref": relative_error(outs["torch"], ref),
                "tol": tol,
            }
            if "triton" in outs:
                row["triton_vs_ref"] = relative_error(outs["triton"], ref)
                row["triton_vs_torch"] = relative_error(outs["triton"], outs["torch"])
            else:
                row["triton"] = "not checked (interpreter has no bf16)"
            row["ok"] = all(row[k] <= tol for k in row if k.endswith(("_ref", "_torch")))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _bytes_adamw(n: int, width: int, state_width: int) -> int:
    return n * (3 * width + 4 * state_width)  # read p, g, m, v; write p, m, v


def _bytes_nano(sel: int, width: int, state_width: int, index_width: int) -> int:
    # read idx, p[I], g[I], m, v, age; write p[I], m, v, age
    return sel * (index_width + 3 * width + 4 * state_width + 8)


def speed(device, toy: bool) -> list[dict]:
    rows = []
    shapes = _shapes(toy)
    n = sum(a * b for a, b in shapes)
    on_gpu = device.type == "cuda"
    min_time = 0.05 if toy else 0.3
    reps = 3 if toy else None  # the interpreter is slow: three timed calls are enough
    for dtype in (torch.float32, torch.bfloat16):
        width = torch.finfo(dtype).bits // 8
        ps = _params(shapes, dtype, device)
        adamw = torch.optim.AdamW(
            ps, lr=1e-4, weight_decay=0.0, **({"fused": True} if on_gpu else {"foreach": True})
        )
        adamw_mem = peak_memory_cuda(adamw.step) if on_gpu else None
        t_adamw = time_fn(adamw.step, min_time=min_time, repeats=reps).median
        adamw_bytes = sum(
            v.numel() * v.element_size()
            for st in adamw.state.values()
            for v in st.values()
            if torch.is_tensor(v)
        )
        state_width = adamw.state[ps[0]]["exp_avg"].element_size()
        del adamw
        for k in (0.01, 0.1):
            opt = NanoAdam(ps, lr=1e-4, density=k, mask_interval=None, chunk_size=4096)
            nano_mem = peak_memory_cuda(opt.refresh_masks) if on_gpu else None
            t_refresh = time_fn(opt.refresh_masks, warmup=1, min_time=min_time, repeats=reps).median
            sel = sum(opt.state[p]["idx"].numel() for p in ps)
            times = {}
            for backend in ("triton", "torch"):
                times[backend] = time_fn(
                    lambda b=backend, o=opt: _compact_step(o, b), min_time=min_time, repeats=reps
                ).median
            step_mem = (
                peak_memory_cuda(lambda o=opt: _compact_step(o, "triton")) if on_gpu else None
            )
            nbytes = _bytes_nano(sel, width, 4, 4)
            row = {
                "dtype": str(dtype).removeprefix("torch."),
                "params": n,
                "tensors": len(shapes),
                "density": k,
                "adamw_fused_ms": 1e3 * t_adamw,
                "triton_ms": 1e3 * times["triton"],
                "torch_ms": 1e3 * times["torch"],
                "refresh_ms": 1e3 * t_refresh,
                "amortised_ms_m100": 1e3 * (times["triton"] + t_refresh / 100),
                "triton_over_adamw": times["triton"] / t_adamw,
                "adamw_GBps": _bytes_adamw(n, width, state_width) / t_adamw / 1e9,
                "triton_GBps": nbytes / times["triton"] / 1e9,
                "torch_GBps": nbytes / times["torch"] / 1e9,
                "state_bytes": opt.state_bytes(),
                "adamw_state_bytes": adamw_bytes,
                "adamw_first_step_peak_bytes": adamw_mem,
                "refresh_peak_bytes": nano_mem,
                "triton_step_peak_bytes": step_mem,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            del opt
        del ps
        if on_gpu:
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy", action="store_true", help="tiny shapes (interpreter on CPU)")
    ap.add_argument("--out", default="nanoadam-gpu.json")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.toy:
        print("no CUDA device: run with --toy (Triton interpreter) or on a GPU", file=sys.stderr)
        return 2
    result = {"environment": environment(), "device": str(device), "toy": args.toy}
    result["correctness"] = correctness(device, args.toy)
    if not all(r["ok"] for r in result["correctness"]):
        print("correctness failed: not timing", file=sys.stderr)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        return 1
    result["speed"] = speed(device, args.toy)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
