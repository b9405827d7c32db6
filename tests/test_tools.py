"""The repo scripts: the package scaffold and the changed-packages selector."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tomllib

import pytest

from tests.workspace import ROOT, structure_problems


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


new_package = _load("new_package")
changed_packages = _load("changed_packages")


def test_scaffold_produces_a_package_the_workspace_checks_accept(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "packages").mkdir()
    target = new_package.scaffold(
        "demo", "A Demo Paper", "https://arxiv.org/abs/0000.00000", root=tmp_path
    )
    assert structure_problems(target) == []
    root = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert "demo" in root["dependency-groups"]["dev"]
    assert root["tool"]["uv"]["sources"]["demo"] == {"workspace": True}
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["neurips25.benchmarks"] == {"demo": "demo.bench:SUITE"}
    with pytest.raises(SystemExit, match="already exists"):
        new_package.scaffold("demo", "x", "y", root=tmp_path)
    with pytest.raises(SystemExit, match="NAME"):
        new_package.scaffold("Bad-Name", "x", "y", root=tmp_path)


def test_scaffolded_suite_and_tests_run(tmp_path, monkeypatch):
    """The generated bench module declares a suite whose smoke case passes the workspace smoke test."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "packages").mkdir()
    target = new_package.scaffold("demo", "A Demo Paper", "https://x", root=tmp_path)
    sys.path.insert(0, str(target / "src"))
    try:
        bench = importlib.import_module("demo.bench")
        from tests.test_smoke import test_every_case_runs_in_smoke_mode_on_an_empty_cache as smoke

        for case in bench.SUITE.cases:
            out = tmp_path / "out" / case.name
            out.mkdir(parents=True)
            smoke(bench.SUITE, case, tmp_path / "cache", out, monkeypatch)
        results = bench.SUITE.cases[0].run("demo", "smoke", tmp_path / "out")
        assert results[0].metric == "time" and results[0].value > 0
        assert any(r.baseline == "torch.mm" and r.ratio for r in results)
    finally:
        sys.path.remove(str(target / "src"))
        for mod in [m for m in sys.modules if m == "demo" or m.startswith("demo.")]:
            del sys.modules[mod]


def test_changed_packages_selection():
    everything = changed_packages.members()
    assert "neurips25-core" in everything
    some_pkg = next((n for n, p in everything.items() if p.startswith("packages/")), None)
    if some_pkg is not None:
        path = everything[some_pkg]
        assert changed_packages.select([f"{path}/src/x.py"]) == {some_pkg: path}
    for trigger in [
        "shared/core/src/neurips25_core/bench.py",
        "uv.lock",
        "pyproject.toml",
        ".github/workflows/ci.yml",
    ]:
        assert changed_packages.select([trigger]) == everything
    assert changed_packages.select(["README.md"]) == {}
