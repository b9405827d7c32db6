"""The tfla benchmark suite (``neurips25 bench tfla``)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite

SUITE = Suite(
    name="tfla",
    paper="Tiled Flash Linear Attention: More Efficient Linear RNN and xLSTM Kernels",
    url="https://arxiv.org/abs/2503.14376",
)


@SUITE.case("import", kind="speed", modes=("quick", "full"))
def import_time(ctx: Context) -> None:
    """Placeholder case: how long importing the package takes (replace with real cases)."""
    import importlib
    import time

    start = time.perf_counter()
    importlib.import_module("tfla")
    ctx.record("import_time", time.perf_counter() - start, "s")
