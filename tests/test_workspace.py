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
        d.split("[")[0].split(">")[0].split("=")[0].strip()
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


# What only the core may define (CONTRIBUTING.md, "The core's helpers"): a package that sets the
# thread count, reads /proc for peak RSS, takes a file lock or saves checkpoints into the cache
# folder itself has copied a core helper instead of using it.
_CORE_ONLY = {
    "torch.set_num_threads(": "use neurips25_core.bench.single_thread()/num_threads(n)",
    "numba.set_num_threads(": "use neurips25_core.cpu.numba_parallel()/numba_num_threads(n)",
    "VmHWM": "use neurips25_core.bench.peak_rss_subprocess",
    "clear_refs": "use neurips25_core.bench.peak_rss_subprocess",
    "fcntl": "use neurips25_core.models.cached_checkpoint (it holds the lock)",
    "cache_dir()": "use neurips25_core.models.cached_checkpoint",
}


@pytest.mark.parametrize("member", [m for m in MEMBERS if m.parent.name == "packages"], ids=IDS[1:])
def test_member_has_no_copy_of_a_core_helper(member):
    found = []
    for path in sorted((member / "src").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "core-helper-ok" in line:  # e.g. inside the code string a fresh subprocess runs
                continue
            for needle, instead in _CORE_ONLY.items():
                if needle in line:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {needle!r} ({instead})")
    assert found == [], (
        "\n".join(found) + "\n(a line that must stay, e.g. in a subprocess's code string, "
        "carries a '# core-helper-ok: why' comment)"
    )
