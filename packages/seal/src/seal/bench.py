"""The seal benchmark suite (``neurips25 bench seal``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache.
"""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="seal",
    paper="Self-Refining Language Model Anonymizers via Adversarial Distillation",
    url="https://arxiv.org/abs/2506.01420",
)


@SUITE.case("placeholder_speed", kind="speed")
def placeholder_speed(ctx: Context) -> None:
    """Placeholder: replace with ours vs the baseline and the peer, outputs checked equal first."""
    import torch

    n = ctx.pick(smoke=64, quick=512, full=2048)
    a = torch.randn(n, n)
    with single_thread():
        result = compare(
            {"torch.mm": lambda: a @ a, "einsum": lambda: torch.einsum("ij,jk->ik", a, a)},
            baseline="torch.mm",
            min_time=ctx.pick(smoke=0.01, quick=0.2, full=1.0),
        )
    result.record(ctx, n=n)
