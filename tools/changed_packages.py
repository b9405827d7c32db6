#!/usr/bin/env python3
"""Print the workspace members touched by a diff: ``python tools/changed_packages.py [--base REF] [--json]``.

A change under ``packages/NAME/`` selects NAME. A change to the core (``shared/core``), the root
``pyproject.toml``, ``uv.lock``, ``conftest.py``, ``tools/``, ``tests/``, ``.ci/`` or ``.github/``
selects every member. Other files (the top-level README, docs) select nothing. With ``--json``
the output is a list of ``{"name", "path"}`` objects for a CI matrix. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SELECTS_ALL = (
    "shared/core/",
    "pyproject.toml",
    "uv.lock",
    "conftest.py",
    "tools/",
    "tests/",
    ".ci/",
    ".github/",
)


def members(root: Path = ROOT) -> dict[str, str]:
    """Workspace members as ``{distribution name: path}`` (the core first)."""
    found = {}
    for pyproject in [
        root / "shared" / "core" / "pyproject.toml",
        *sorted((root / "packages").glob("*/pyproject.toml")),
    ]:
        if pyproject.is_file():
            name = tomllib.loads(pyproject.read_text())["project"]["name"]
            found[name] = pyproject.parent.relative_to(root).as_posix()
    return found


def select(paths: list[str], root: Path = ROOT) -> dict[str, str]:
    """The members that a change to ``paths`` (repo-relative, POSIX) must re-test."""
    every = members(root)
    chosen: dict[str, str] = {}
    for p in paths:
        if p.startswith(SELECTS_ALL) or p in SELECTS_ALL:
            return every
        for name, path in every.items():
            if p.startswith(path + "/"):
                chosen[name] = path
    return {n: every[n] for n in every if n in chosen}


def changed_files(base: str, root: Path = ROOT) -> list[str]:
    """Files differing between ``base`` and the working tree (committed or not), plus untracked ones."""
    diff = subprocess.run(
        ["git", "diff", "--name-only", base], capture_output=True, text=True, cwd=root
    )
    if diff.returncode != 0:
        raise SystemExit(f"error: git diff against --base {base!r} failed: {diff.stderr.strip()}")
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout
    return sorted({*diff.stdout.split(), *untracked.split()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", default="origin/main", help="git ref to diff against (default origin/main)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of {name, path}")
    parser.add_argument(
        "--all", action="store_true", help="select every member regardless of the diff"
    )
    args = parser.parse_args(argv)
    chosen = members() if args.all else select(changed_files(args.base))
    if args.json:
        print(json.dumps([{"name": n, "path": p} for n, p in chosen.items()]))
    else:
        for name in chosen:
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
