import json

import pytest
import torch

from neurips25_core.bench import (
    BenchResult,
    LivePeak,
    Suite,
    load_json,
    peak_live_bytes,
    peak_rss_subprocess,
    plot_bars,
    plot_lines,
    roofline,
    time_fn,
    write_json,
    write_markdown,
)


def test_time_fn_reports_ordered_percentiles():
    t = time_fn(lambda: torch.randn(64, 64) @ torch.randn(64, 64), warmup=1, repeats=7)
    assert t.repeats == 7 and t.device == "cpu"
    assert 0 < t.p20 <= t.median <= t.p80
    with pytest.raises(ValueError, match="repeats"):
        time_fn(lambda: None, repeats=0)


def test_ratio_direction():
    fast = BenchResult("s", "c", "time", value=1.0, unit="s", baseline="slow", baseline_value=3.0)
    assert fast.ratio == pytest.approx(3.0)
    acc = BenchResult(
        "s", "c", "acc", value=0.9, unit="", baseline_value=0.6, lower_is_better=False
    )
    assert acc.ratio == pytest.approx(1.5)
    assert fast.torch == torch.__version__ and fast.date and fast.machine


def test_json_markdown_round_trip(tmp_path):
    rs = [
        BenchResult("s", "c", "time", 2.0, "s", baseline="b", baseline_value=4.0, params={"M": 1})
    ]
    write_json(rs, tmp_path / "r.json")
    back = load_json(tmp_path / "r.json")
    assert back[0].ratio == pytest.approx(2.0) and back[0].params == {"M": 1}
    md = write_markdown(rs, tmp_path / "r.md", title="T").read_text()
    assert "| s | c[M=1]/time | 2 | b | 4 | 2×" in md
    assert json.loads((tmp_path / "r.json").read_text())[0]["git_commit"]


def test_plots_are_written(tmp_path):
    p = plot_lines(
        [1, 2, 4],
        {"a": [1, 2, 3], "b": [2, 1, 0.5]},
        tmp_path / "l.png",
        logx=True,
        errors={"a": [0.1, 0.1, 0.2]},
    )
    q = plot_bars(["x", "y"], {"a": [1, 2]}, tmp_path / "b.png")
    assert p.stat().st_size > 1000 and q.stat().st_size > 1000


def test_peak_rss_subprocess_sees_a_large_allocation():
    # The setup allocates and frees 128 MiB first: its peak must not hide the measured code's.
    setup = "y = b'\\x01' * (128 << 20)\ndel y"
    small = peak_rss_subprocess("x = b'\\x01' * 1024", setup=setup)
    big = peak_rss_subprocess("x = b'\\x01' * (64 << 20)", setup=setup)  # 64 MiB, written
    assert big["delta"] > 48 * 1024 * 1024 > small["delta"]
    with pytest.raises(RuntimeError, match="failed"):
        peak_rss_subprocess("raise SystemExit(3)", setup="")


def test_roofline_measures_positive_limits():
    r = roofline(matmul_size=256, copy_bytes=8 << 20)
    assert r["fp32_flops"] > 1e8 and r["bandwidth"] > 1e8
    assert ("bf16_flops" in r) == torch.cuda.is_available()


def test_suite_declaration_and_validation(tmp_path):
    suite = Suite("demo", paper="P")

    @suite.case("one", kind="speed", modes=("quick",))
    def one(ctx):
        ctx.record("m", 1.0, "s", baseline="b", baseline_value=2.0, n=3)

    assert [c.name for c in suite.cases_for("quick")] == ["one"]
    assert suite.cases_for("full") == []
    results = suite.cases[0].run("demo", "quick", tmp_path)
    assert results[0].ratio == pytest.approx(2.0) and results[0].params == {"n": 3}
    with pytest.raises(ValueError, match="kind"):
        suite.case("two", kind="fast")
    with pytest.raises(ValueError, match="already declared"):
        suite.case("one", kind="speed")(lambda ctx: None)


def test_compare_interleaves_and_takes_ratios_of_medians():
    from neurips25_core.bench import compare

    calls = []
    a = torch.randn(128, 128)
    result = compare(
        {
            "slow": lambda: (calls.append("slow"), [a @ a for _ in range(4)]),
            "fast": lambda: (calls.append("fast"), a @ a),
        },
        baseline="slow",
        rounds=7,
        warmup=1,
        cpu_time=True,
    )
    # warm-up once each, then strictly alternating rounds
    assert calls[2:] == ["slow", "fast"] * 7
    assert result.rounds == 7 and result["fast"].repeats == 7
    assert result.ratios["fast"] == pytest.approx(result["slow"].median / result["fast"].median)
    assert result.ratios["fast"] > 1.5
    assert set(result.cpu) == {"slow", "fast"} and result.cpu["fast"].median > 0
    assert result.load_start is not None and result.load_end is not None
    with pytest.raises(ValueError, match="baseline"):
        compare({"a": lambda: None}, baseline="b")
    with pytest.raises(TypeError, match="fns"):
        compare({"a": 1})


def test_comparison_records_against_its_baseline(tmp_path):
    from neurips25_core.bench import Context, compare

    ctx = Context("s", "c", "smoke", tmp_path)
    compare({"base": lambda: sum(range(2000)), "ours": lambda: None}, rounds=3).record(ctx, n=1)
    rows = {r.params["impl"]: r for r in ctx.results}
    assert rows["ours"].baseline == "base" and rows["ours"].ratio > 1
    assert rows["base"].baseline is None and rows["base"].params["rounds"] == 3


def test_single_thread_restores_the_thread_count():
    from neurips25_core.bench import num_threads, single_thread

    before = torch.get_num_threads()
    with single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), num_threads(1):
        raise RuntimeError
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n"):
        num_threads(0).__enter__()


def test_context_pick_and_smoke_is_a_mode():
    from neurips25_core.bench import MODES, Context

    assert MODES == ("smoke", "quick", "full")
    ctx = Context("s", "c", "smoke", "/tmp")
    assert ctx.smoke and not ctx.quick and ctx.pick(1, 2, 3) == 1
    s = Suite("s", "p")
    s.case("c", kind="speed")(lambda ctx: None)
    assert s.cases[0].modes == MODES
    with pytest.raises(ValueError, match="modes"):
        s.case("d", kind="speed", modes=("tiny",))


def test_dirty_tree_results_say_so(tmp_path):
    rs = [BenchResult("s", "c", "t", 1.0, "s", git_commit="abc-dirty", machine="m")]
    assert "uncommitted changes" in write_markdown(rs, tmp_path / "r.md").read_text()
    rs = [BenchResult("s", "c", "t", 1.0, "s", git_commit="abc", machine="m")]
    assert "uncommitted" not in write_markdown(rs, tmp_path / "r.md").read_text()


def test_pinned_provenance_keeps_the_commit_taken_at_the_start(monkeypatch):
    from neurips25_core import bench

    states = iter([("abc", True), ("abc", False)])
    monkeypatch.setattr(bench, "git_state", lambda cwd=None: next(states))
    with bench.pinned_provenance() as stamp:
        r = BenchResult("s", "c", "t", 1.0, "s")  # the tree changed meanwhile: still "abc"
    assert stamp == "abc" and r.git_commit == "abc"


def test_compare_stops_when_the_slow_function_has_had_enough_time():
    import time as _time

    from neurips25_core.bench import compare

    result = compare(
        {"slow": lambda: _time.sleep(0.02), "fast": lambda: None},
        min_time=0.01,
        max_time=0.2,
        min_rounds=3,
        warmup=0,
    )
    # "fast" never reaches min_time; the slow one's 0.2 s cap ends it near 10 rounds, not 200
    assert 3 <= result.rounds <= 15


def test_live_peak_counts_known_allocations_once_and_frees_them():
    before = torch.ones(10_000)  # exists before the mode: never counted
    with LivePeak() as mode:
        a = torch.empty(1000, dtype=torch.float64)  # 8000 B
        view = a[10:20].view(2, 5)  # a view shares a's storage: no new bytes
        b = torch.empty(500, dtype=torch.int16)  # 1000 B
        assert (mode.current, mode.peak) == (9000, 9000)
        del a, view  # a's storage is freed only with its last view
        assert mode.current == 1000
        c = before + 1  # 40000 B, on top of b
        assert (mode.current, mode.peak) == (41_000, 41_000)
        del b, c
    assert (mode.current, mode.peak) == (0, 41_000)


def test_peak_live_bytes_sees_only_what_is_alive_at_once():
    def sequential():
        a = torch.empty(1000)  # 4000 B, freed before b exists
        del a
        return torch.empty(500)  # 2000 B

    def together():
        return [torch.empty(1000), torch.empty(500)]

    assert peak_live_bytes(sequential) == 4000
    assert peak_live_bytes(together) == 6000
    assert peak_live_bytes(lambda: None) == 0


def test_peak_live_bytes_of_a_backward_step_counts_grads_and_saved_tensors():
    torch.manual_seed(0)
    w = torch.randn(64, 32, requires_grad=True)
    x = torch.randn(16, 64)

    def step():
        (x @ w).square().sum().backward()

    step()  # w.grad exists before the measured step (not counted), as optimizer state would
    peak = peak_live_bytes(step)
    y, g = 16 * 32 * 4, 64 * 32 * 4  # bytes of x @ w and of w's gradient
    # mm's backward makes w's new gradient (g) from y's gradient (y bytes, alive as its input);
    # at most every op output (y, y², y's gradient and its intermediate, g and the accumulated
    # grad, two scalars) is alive at once
    assert y + g <= peak <= 4 * y + 2 * g + 16
