"""The dlgn benchmark suite (``neurips25 bench dlgn``)."""

from __future__ import annotations

from neurips25_core.bench import Suite

SUITE = Suite(
    name="dlgn",
    paper="Mind the Gap: Removing the Discretization Gap in Differentiable Logic Gate Networks",
    url="https://arxiv.org/abs/2506.07500",
)
