"""The suite declares its cases; the decode-step case runs at smoke size and records every arm."""

from __future__ import annotations

import pytest
from xecomla.bench import SUITE

from neurips25_core.bench import Context


def test_suite_cases():
    assert SUITE.name == "xecomla"
    assert {c.name for c in SUITE.cases} == {"decode_step"}


@pytest.mark.slow  # ~10 s on a loaded machine; tests/test_smoke.py runs it in CI too
def test_decode_step_smoke(tmp_path):
    case = next(c for c in SUITE.cases if c.name == "decode_step")
    ctx = Context(suite="xecomla", case="decode_step", mode="smoke", out_dir=tmp_path)
    case.fn(ctx)
    impls = {r.params["impl"] for r in ctx.results}
    assert impls == {"gqa", "mla_absorbed", "mla_decompressed", "mamba2_step"}
    assert all(r.value > 0 for r in ctx.results)
