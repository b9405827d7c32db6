"""Standalone installs: each member's wheel plus the core's, in a fresh environment, passes its tests.

Marked ``slow`` (it builds wheels and creates environments); CI's ``standalone`` job runs the same
steps per changed member. Run here with ``uv run pytest tests/test_standalone.py -m slow``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.workspace import ROOT, member_dirs, project

MEMBERS = member_dirs()
IDS = [m.name if m.parent.name == "packages" else "core" for m in MEMBERS]

PYTEST_INI = "[pytest]\naddopts = --import-mode=importlib -m 'not slow'\nmarkers =\n    slow: slow\n    cuda: cuda\n"


@pytest.mark.slow
@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_member_wheel_installs_and_passes_its_tests_alone(member, tmp_path):
    uv = shutil.which("uv")
    assert uv, "uv is needed to build wheels (pip install uv)"
    dist = tmp_path / "dist"
    names = ["neurips25-core"] + (
        [project(member)["name"]] if member.parent.name == "packages" else []
    )
    for name in names:
        subprocess.run(
            [uv, "build", "--package", name, "--wheel", "--out-dir", str(dist)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *wheels, "pytest"],
        check=True,
        capture_output=True,
    )
    # Tests run from a copy outside the repository, so only the installed wheels can be imported.
    shutil.copytree(member / "tests", tmp_path / "tests")
    if (member / "benchmarks").is_dir():  # the GPU script's --toy run is tested too
        shutil.copytree(member / "benchmarks", tmp_path / "benchmarks")
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "tests", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
