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


def test_bench_smoke_mode_runs_the_core_suite(tmp_path, capsys):
    assert cli.main(["bench", "core", "--smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["params"].get("n") for r in results if r["metric"] == "fp32_matmul"} == {256}
    assert "--smoke" in (tmp_path / "results.md").read_text()


def test_results_from_a_dirty_tree_warn(tmp_path, monkeypatch, capsys):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (repo / "f.txt").write_text("a")
    run("add", "f.txt")
    run("-c", "user.email=x@y", "-c", "user.name=x", "commit", "-qm", "x")
    monkeypatch.chdir(repo)
    cli._warn_if_dirty_results(repo / "packages" / "p" / "results")
    assert "uncommitted" not in capsys.readouterr().err
    (repo / "f.txt").write_text("b")
    cli._warn_if_dirty_results(repo / "packages" / "p" / "results")
    assert "uncommitted changes" in capsys.readouterr().err
    cli._warn_if_dirty_results(repo / "bench-out")  # not a results folder: no warning
    assert capsys.readouterr().err == ""
