"""The codegemm benchmark suite (``neurips25 bench codegemm``)."""

from __future__ import annotations

from neurips25_core.bench import Context, Suite

SUITE = Suite(name="codegemm", paper="CodeGEMM: A Codebook-Centric Approach to Efficient GEMM in Quantized LLMs", url="https://arxiv.org/abs/2512.17970")


@SUITE.case("import", kind="speed", modes=("quick", "full"))
def import_time(ctx: Context) -> None:
    """Placeholder case: how long importing the package takes (replace with real cases)."""
    import importlib
    import time

    start = time.perf_counter()
    importlib.import_module("codegemm")
    ctx.record("import_time", time.perf_counter() - start, "s")
