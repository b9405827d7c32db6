"""The benchmark suite: declared cases, the speed and QA cases end to end at smoke size, gpu.py --toy."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from ptmoe.bench import SUITE, qa, step_time

from neurips25_core.bench import Context

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def _has_peft() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def test_suite_cases():
    assert SUITE.name == "ptmoe"
    expected = {
        "smoke": {"step_time", "qa", "math"},
        "quick": {"step_time", "qa"},  # the issue's --quick: QA only
        "full": {"step_time", "qa", "math"},
    }
    for mode, names in expected.items():
        assert {c.name for c in SUITE.cases_for(mode)} == names, mode


def test_qa_smoke_trains_scores_and_routes(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path / "cache"))
    ctx = Context(suite="ptmoe", case="qa", mode="smoke", out_dir=tmp_path, log=lambda _: None)
    qa(ctx)
    arms = {"ptmoe", "pt"} | ({"peft_lora"} if _has_peft() else set())
    overall = [r for r in ctx.results if r.params.get("domain") == "all"]
    f1 = {r.params["impl"]: r for r in overall if r.metric == "in_domain_f1"}
    assert set(f1) == arms
    assert all(0 <= r.value <= 1 and r.params["seeds"] == 1 for r in f1.values())
    assert {r.params["impl"] for r in overall if r.metric == "out_of_domain_em"} == arms
    # Per-domain rows too: the six in-domain generators.
    assert {r.params["domain"] for r in ctx.results if r.metric == "in_domain_f1"} == {
        "all",
        "city",
        "colour",
        "identifier",
        "birth",
        "job",
        "pet",
    }
    runs = json.loads((tmp_path / "qa_runs.json").read_text())
    # The answer-type guessing chance is recorded next to the arms, per held-out set.
    guess = {r.params["set"]: r.value for r in ctx.results if r.metric == "typed_guess_f1"}
    assert set(guess) == set(runs["typed_guess"]) and len(guess) >= 2
    assert all(0 < v <= 1 and v == runs["typed_guess"][k]["all"]["f1"] for k, v in guess.items())
    for run in runs["runs"]:
        # Training ran (not under no_grad by accident) and the losses are finite.
        assert math.isfinite(run["loss_start"]) and math.isfinite(run["loss_end"])
    moe = next(r for r in runs["runs"] if r["arm"] == "ptmoe")
    hist = moe["routing"]["in_domain"]["histogram"]
    # Every held-out example is routed once, counted under its own domain.
    assert sum(map(sum, hist.values())) == 6 == moe["routing"]["in_domain"]["examples"]
    assert set(hist) <= {"city", "colour", "identifier", "birth", "job", "pet"}
    shares = [r for r in ctx.results if r.metric == "expert0_share"]
    assert shares and all(0 <= r.value <= 1 for r in shares)
    assert (tmp_path / "qa_expert_histogram.png").stat().st_size > 0
    assert (tmp_path / "qa_arms.png").stat().st_size > 0


@pytest.mark.slow  # ~25 s CPU: two spawned workers each import torch, transformers and peft
def test_quality_runs_in_two_processes_equal_one(tmp_path, monkeypatch):
    """The full plan's runs fan out over PTMOE_WORKERS processes; each run is rebuilt from its
    seeds, so two worker processes give exactly the results of one process (smoke size)."""
    from ptmoe import bench, quality

    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTMOE_WORKERS", "2")
    assert bench._workers() == 2
    monkeypatch.setenv("PTMOE_WORKERS", "0")
    with pytest.raises(ValueError, match="PTMOE_WORKERS"):
        bench._workers()
    ctx = Context(suite="ptmoe", case="qa", mode="smoke", out_dir=tmp_path, log=lambda _: None)
    plan = bench.Plan("smoke", ("ptmoe", "pt"), 2, (0,), n_train=16, n_eval=4, max_new_tokens=3)
    quality.pretrained_base("smoke", progress=False)  # cached before the workers start
    items = [("ptmoe", 1e-1, 0), ("pt", 3e-2, 1), ("ptmoe", 3e-2, 2)]
    one = bench.run_jobs(ctx, "qa", plan, items, workers=1)
    two = bench.run_jobs(ctx, "qa", plan, items, workers=2)
    drop = ("seconds", "cpu_seconds")
    assert [(r["arm"], r["lr"], r["seed"]) for r in two] == items
    assert [{k: v for k, v in r.items() if k not in drop} for r in one] == [
        {k: v for k, v in r.items() if k not in drop} for r in two
    ]
    assert one[0]["loss_end"] != one[2]["loss_end"]  # the runs differ: equality is not trivial


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


def _gpu_script():
    spec = importlib.util.spec_from_file_location("ptmoe_gpu_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_script_toy(tmp_path, monkeypatch, capsys):
    """benchmarks/gpu.py --toy end to end on CPU (no GPU here): speed rows per arm, then the QA run.

    Loaded in this process (a subprocess would pay the transformers import again).
    """
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "gpu.json"
    _gpu_script().main(["--toy", "--out", str(out)])
    result = json.loads(out.read_text())
    speed = {r["arm"]: r for r in result["rows"] if r["section"] == "speed"}
    expected = {"pt", "ptmoe", "smop"} | ({"peft_pt", "peft_lora"} if _has_peft() else set())
    assert set(speed) == expected
    for row in speed.values():
        assert row["step_s"] > 0 and row["generate_tokens_per_s"] > 0
        assert row["peak_memory_bytes"] > 0 and row["trainable"] > 0
    qa_rows = {r["arm"]: r for r in result["rows"] if r["section"] == "qa"}
    assert {"ptmoe", "pt"} <= set(qa_rows)
    assert all(0 <= r["in_domain_f1"] <= 1 for r in qa_rows.values())
    if _has_peft():
        assert "our PT = peft PT" in capsys.readouterr().out


def test_gpu_script_refuses_cpu_without_toy():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the full run would start")
    with pytest.raises(SystemExit) as info:
        _gpu_script().main([])
    assert info.value.code == 2
