"""The pdssm benchmark suite (``neurips25 bench pdssm``)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite

SUITE = Suite(
    name="pdssm",
    paper="Structured Sparse Transition Matrices to Enable State Tracking in State-Space Models",
    url="https://arxiv.org/abs/2509.22284",
)


@SUITE.case("import", kind="speed", modes=("quick", "full"))
def import_time(ctx: Context) -> None:
    """Placeholder case: how long importing the package takes (replace with real cases)."""
    import importlib
    import time

    start = time.perf_counter()
    importlib.import_module("pdssm")
    ctx.record("import_time", time.perf_counter() - start, "s")
