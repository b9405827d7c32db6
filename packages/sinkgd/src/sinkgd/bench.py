"""The sinkgd benchmark suite (``neurips25 bench sinkgd``)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite

SUITE = Suite(name="sinkgd", paper="Gradient Multi-Normalization for Efficient LLM Training", url="https://arxiv.org/abs/2502.06742")


@SUITE.case("import", kind="speed", modes=("quick", "full"))
def import_time(ctx: Context) -> None:
    """Placeholder case: how long importing the package takes (replace with real cases)."""
    import importlib
    import time

    start = time.perf_counter()
    importlib.import_module("sinkgd")
    ctx.record("import_time", time.perf_counter() - start, "s")
