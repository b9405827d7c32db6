"""The installed ``neurips25`` console script on the core suite (list, bench, report, errors)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.workspace import ROOT

EXE = shutil.which("neurips25") or str(Path(sys.executable).parent / "neurips25")


def run(*args, cwd=ROOT):
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_list_names_the_core_suite():
    proc = run("list")
    assert "core" in proc.stdout and "roofline" in proc.stdout


def test_unknown_suite_exits_2():
    proc = run("bench", "nosuch")
    assert proc.returncode == 2
    assert "nosuch" in proc.stderr and "core" in proc.stderr


def test_bench_then_report(tmp_path):
    out = tmp_path / "packages" / "core" / "results"
    proc = run("bench", "core", "--quick", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "| core | roofline" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert all(r["value"] > 0 for r in results)
    (tmp_path / "pyproject.toml").write_text("")
    rep = run("report", "--root", str(tmp_path))
    assert rep.returncode == 0 and "copy_bandwidth" in rep.stdout


def test_help_mentions_modes():
    proc = run("bench", "--help")
    assert "--quick" in proc.stdout and "--full" in proc.stdout
