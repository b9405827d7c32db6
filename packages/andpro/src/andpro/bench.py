"""The andpro benchmark suite (``neurips25 bench andpro``)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite

SUITE = Suite(name="andpro", paper="Accurate KV Cache Eviction via Anchor Direction Projection for Efficient LLM Inference", url="https://openreview.net/forum?id=Tdl89SZItB")


@SUITE.case("import", kind="speed", modes=("quick", "full"))
def import_time(ctx: Context) -> None:
    """Placeholder case: how long importing the package takes (replace with real cases)."""
    import importlib
    import time

    start = time.perf_counter()
    importlib.import_module("andpro")
    ctx.record("import_time", time.perf_counter() - start, "s")
