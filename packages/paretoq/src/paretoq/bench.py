"""The paretoq benchmark suite (``neurips25 bench paretoq``)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite

SUITE = Suite(
    name="paretoq",
    paper="ParetoQ: Scaling Laws in Extremely Low-bit LLM Quantization",
    url="https://arxiv.org/abs/2502.02631",
)


@SUITE.case("import", kind="speed", modes=("quick", "full"))
def import_time(ctx: Context) -> None:
    """Placeholder case: how long importing the package takes (replace with real cases)."""
    import importlib
    import time

    start = time.perf_counter()
    importlib.import_module("paretoq")
    ctx.record("import_time", time.perf_counter() - start, "s")
