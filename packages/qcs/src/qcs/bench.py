"""The qcs benchmark suite (``neurips25 bench qcs``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache.

Built so far: ``projection_speed`` only (the quality reproduction and the QCS-vs-LESS speed case
are not built yet).
"""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="qcs",
    paper="Quadratic Coreset Selection: Certifying and Reconciling Sequence and Token Mining for Efficient Instruction Tuning",
    url="https://openreview.net/forum?id=btZm6DUaDO",
)


@SUITE.case("projection_speed", kind="speed")
def projection_speed(ctx: Context) -> None:
    """The per-step budget projection of ``t [n, T]``: exact sort (ours) vs PBCS-style bisection.

    Both project every row onto ``{Σ_j t_ij = α T_i, 0 ≤ t ≤ 1}`` with ragged lengths; outputs are
    checked equal (1e-5) before timing. Baseline: bisection (what PBCS does, here run to 1e-6).
    """
    import torch

    from .ops import project_capped_simplex

    n = ctx.pick(smoke=64, quick=2000, full=100_000)
    T = ctx.pick(smoke=32, quick=512, full=512)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]
    x = (0.5 + 0.3 * torch.randn(n, T, generator=g)) * mask
    total = 0.5 * lengths.float()
    fns = {
        "bisect (PBCS-style)": lambda: project_capped_simplex(x, total, mask=mask, method="bisect"),
        "sort (exact)": lambda: project_capped_simplex(x, total, mask=mask, method="sort"),
    }
    a, b = (f() for f in fns.values())
    err = float((a - b).abs().max())
    if not err <= 1e-5:
        raise AssertionError(f"sort and bisect projections differ by {err:.3e}")
    with single_thread():
        result = compare(
            fns,
            baseline="bisect (PBCS-style)",
            min_time=ctx.pick(smoke=0.01, quick=0.5, full=2.0),
            max_time=ctx.pick(smoke=2.0, quick=15.0, full=120.0),
        )
    result.record(ctx, n=n, T=T, max_abs_diff=float(f"{err:.3g}"))
