"""Workspace-level checks on every member: layout, registered suite, lean imports, declared deps."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points

import pytest

from tests.workspace import (
    ROOT,
    declared_distributions,
    import_name,
    member_dirs,
    project,
    structure_problems,
    undeclared_imports,
)

MEMBERS = member_dirs()
IDS = [m.name if m.parent.name == "packages" else "core" for m in MEMBERS]


def test_workspace_lists_every_member_in_the_dev_group():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = {
        d.split(">")[0].split("=")[0].strip()
        for d in root["dependency-groups"]["dev"]
        if isinstance(d, str)
    }
    sources = set(root["tool"]["uv"]["sources"])
    for m in MEMBERS:
        name = project(m)["name"]
        assert name in dev, f"{name} missing from the root dev group (tools/new_package.py adds it)"
        assert name in sources, f"{name} missing from [tool.uv.sources]"
    assert root["tool"]["uv"]["python-downloads"] == "never"


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_member_layout(member):
    assert structure_problems(member) == []


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_member_suite_is_registered_and_loads(member):
    from neurips25_core.bench import Suite

    eps = {ep.name: ep for ep in entry_points(group="neurips25.benchmarks")}
    for name in project(member)["entry-points"]["neurips25.benchmarks"]:
        assert name in eps, f"suite {name} not installed (run uv sync)"
        suite = eps[name].load()
        assert isinstance(suite, Suite)
        assert suite.name == name and suite.paper and suite.cases


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_member_imports_are_declared_dependencies(member):
    assert undeclared_imports(member) == {}


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_member_declares_triton_only_on_linux(member):
    for dep in project(member).get("dependencies", []):
        if dep.startswith("triton"):
            assert "sys_platform == 'linux'" in dep.replace('"', "'"), dep


_IMPORT_PROBE = """
import importlib, importlib.abc, sys

class _NoTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError("No module named 'triton' (blocked by the test)")

sys.meta_path.insert(0, _NoTriton())
mod = importlib.import_module({name!r})
for attr in getattr(mod, "__all__", []):
    getattr(mod, attr)
import torch
assert not torch.cuda.is_initialized(), "importing {name} initialised CUDA"
print("ok")
"""


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_importing_is_lean(member):
    """Importing a member and touching its public API needs no Triton and never initialises CUDA.

    Triton is blocked in the subprocess, so a package that imports its kernels eagerly fails here
    (CONTRIBUTING.md: kernels are imported lazily, so packages import on macOS where Triton is absent).
    """
    name = import_name(member)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(name=name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def test_core_depends_on_nothing_in_the_workspace():
    core = ROOT / "shared" / "core"
    others = {project(m)["name"] for m in MEMBERS if m != core}
    assert not declared_distributions(core) & others
