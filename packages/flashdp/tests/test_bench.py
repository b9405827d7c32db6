"""The suite declares its cases for every mode; the cost model follows the spec's table."""

from __future__ import annotations

from flashdp.bench import SUITE, cost_model


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "flashdp"
    assert {"op_speed", "sigma0_gap", "dp_pretraining"} <= names
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names, mode


def test_cost_model_ghost_wins_only_at_short_sequences():
    m = n = 4096
    short, long = cost_model(8, 32, m, n), cost_model(8, 2048, m, n)
    assert short["ghost"]["flops"] < short["flashdp"]["flops"]
    # T² ≲ MN/(M+N) = 2048: ghost's extra Gram FLOPs exceed the per-sample ones at long T
    assert long["ghost"]["flops"] > long["flashdp"]["flops"]
    assert short["flashdp"]["extra_bytes"] == 4 * 2 * m * n
    assert short["explicit"]["extra_bytes"] == 4 * 8 * m * n
