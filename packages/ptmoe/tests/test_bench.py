"""The benchmark suite: declared cases, and the speed case end to end at smoke size."""

from __future__ import annotations

import math

from ptmoe.bench import SUITE, step_time

from neurips25_core.bench import Context


def test_suite_cases():
    assert SUITE.name == "ptmoe"
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == {"step_time"}, mode


def test_step_time_smoke_records_every_arm(tmp_path):
    ctx = Context(
        suite="ptmoe", case="step_time", mode="smoke", out_dir=tmp_path, log=lambda _: None
    )
    step_time(ctx)
    times = {r.params["impl"]: r for r in ctx.results if r.metric == "time"}
    expected = {"pt", "ptmoe", "dpt", "smop"}
    try:
        import peft  # noqa: F401

        expected |= {"peft_pt", "peft_lora"}
    except ImportError:
        pass
    assert set(times) == expected
    assert all(math.isfinite(r.value) and r.value > 0 for r in ctx.results)
    assert all(times[n].baseline == "pt" for n in expected - {"pt"})
    trainable = {
        r.params["impl"]: r.params["trainable"] for r in ctx.results if r.metric == "tokens_per_s"
    }
    assert trainable["pt"] == 10 * 32
    # Budgets at smoke size (H = 32, T = 10): within 15 % of PT's 320.
    assert all(abs(trainable[n] / 320 - 1) <= 0.15 for n in ("ptmoe", "dpt"))
    assert {r.params["impl"] for r in ctx.results if r.metric == "compose_vs_forward"} == {
        "forward",
        "compose",
    }
