"""The lope benchmark suite (``neurips25 bench lope``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache. So far one speed case:
the single-GEMM ``expert_mix`` against the per-expert loop (HydraLoRA's form). The quality case
(the reduced reproduction) and the layer-overhead case are not built yet.
"""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="lope",
    paper="Noise-Robustness Through Noise: A Framework Combining Asymmetric LoRA with Poisoning MoE",
    url="https://arxiv.org/abs/2505.23868",
)


@SUITE.case("expert_mix_speed", kind="speed")
def expert_mix_speed(ctx: Context) -> None:
    """``Σ_n g_n B_n h`` as one GEMM over K = N·r (ours) vs a loop of N GEMMs (baseline), 1 thread.

    Cost model: both do ``2·T·N·r·out`` FLOPs; the loop issues N GEMMs with K = r and N
    accumulations into the output, the single GEMM one GEMM with K = N·r plus forming ``g ⊗ h``
    (``T·N·r``). Outputs are checked equal (1e-6) before timing.
    """
    import torch

    from neurips25_core.testing import assert_close, randn

    from .ops import expert_mix
    from .reference import expert_mix_reference

    T = ctx.pick(smoke=64, quick=1024, full=4096)
    out_features = ctx.pick(smoke=96, quick=256, full=1024)
    rank, experts = 4, 4
    h = randn(T, rank, seed=0)
    gates = torch.softmax(randn(T, experts, seed=1), dim=-1)
    B = randn(experts, out_features, rank, seed=2)
    with torch.no_grad():
        assert_close(
            expert_mix(h, gates, B, 8.0),
            expert_mix_reference(h.double(), gates.double(), B.double(), 8.0),
            rtol=1e-6,
        )
        with single_thread():
            result = compare(
                {
                    "per-expert loop (baseline)": lambda: expert_mix_reference(h, gates, B, 8.0),
                    "single GEMM (ours)": lambda: expert_mix(h, gates, B, 8.0),
                },
                baseline="per-expert loop (baseline)",
                min_time=ctx.pick(smoke=0.01, quick=0.2, full=1.0),
            )
    result.record(ctx, T=T, out=out_features, r=rank, N=experts)
