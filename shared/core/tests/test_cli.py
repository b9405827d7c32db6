import json

from neurips25_core import cli


def test_list_shows_the_core_suite(capsys):
    cli.main(["list"])
    out = capsys.readouterr().out
    assert "core" in out and "roofline" in out


def test_unknown_suite_exits_2_naming_the_known_ones(capsys):
    assert cli.main(["bench", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "nosuch" in err and "core" in err


def test_bench_core_writes_table_json_markdown(tmp_path, capsys):
    assert cli.main(["bench", "core", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "fp32_matmul" in out and "GB/s" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["metric"] for r in results} >= {"fp32_matmul", "copy_bandwidth"}
    assert (tmp_path / "results.md").read_text().startswith("# neurips25 bench core --quick")


def test_a_raising_case_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    from neurips25_core.bench import Suite

    bad = Suite("bad", paper="P")

    @bad.case("boom", kind="speed")
    def boom(ctx):
        raise RuntimeError("kaboom")

    @bad.case("fine", kind="speed")
    def fine(ctx):
        ctx.record("x", 1.0, "s")

    monkeypatch.setattr(cli, "discover_suites", lambda: {"bad": bad})
    assert cli.main(["bench", "bad", "--out", str(tmp_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "kaboom" in captured.err and "bad/boom" in captured.err
    assert json.loads((tmp_path / "results.json").read_text())[0]["case"] == "fine"


def test_report_gathers_committed_results(tmp_path, capsys):
    pkg = tmp_path / "packages" / "demo" / "results"
    pkg.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("")
    from neurips25_core.bench import BenchResult, write_json

    write_json(
        [BenchResult("demo", "c", "time", 1.0, "s", baseline="b", baseline_value=2.0)],
        pkg / "results.json",
    )
    assert cli.main(["report", "--root", str(tmp_path), "--out", str(tmp_path / "R.md")]) == 0
    text = (tmp_path / "R.md").read_text()
    assert "## demo" in text and "2×" in text
