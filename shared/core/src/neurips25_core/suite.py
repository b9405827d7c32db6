"""The core's own benchmark suite, ``core``: this machine's roofline (matmul FLOP/s, bandwidth)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, roofline

SUITE = Suite(
    name="core",
    paper="neurips25 core: the machine's roofline that every package quotes its kernels against",
    url="",
)


@SUITE.case("roofline", kind="speed")
def roofline_case(ctx: Context) -> None:
    """fp32 matmul FLOP/s and copy bandwidth (bytes read + written); bf16 FLOP/s on GPU."""
    import torch

    if torch.cuda.is_available():
        size, copy = ctx.pick(smoke=(1024, 64 << 20), quick=(4096, 256 << 20), full=(8192, 2 << 30))
    else:
        size, copy = ctx.pick(smoke=(256, 16 << 20), quick=(1024, 256 << 20), full=(4096, 1 << 30))
    r = roofline(matmul_size=size, copy_bytes=copy, min_time=ctx.pick(0.05, 0.3, 1.0))
    ctx.record("fp32_matmul", r["fp32_flops"] / 1e9, "GFLOP/s", lower_is_better=False, n=size)
    if "bf16_flops" in r:
        ctx.record("bf16_matmul", r["bf16_flops"] / 1e9, "GFLOP/s", lower_is_better=False, n=size)
    ctx.record("copy_bandwidth", r["bandwidth"] / 1e9, "GB/s", lower_is_better=False, bytes=copy)
    ctx.record(
        "machine_balance",
        r["fp32_flops"] / r["bandwidth"],
        "FLOP/byte",
        lower_is_better=False,
    )
