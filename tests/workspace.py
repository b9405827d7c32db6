"""Checks every workspace member must pass; shared by the workspace tests and the scaffold test."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def member_dirs(root: Path = ROOT) -> list[Path]:
    return [
        root / "shared" / "core",
        *sorted(p.parent for p in (root / "packages").glob("*/pyproject.toml")),
    ]


def project(member: Path) -> dict:
    return tomllib.loads((member / "pyproject.toml").read_text())["project"]


def import_name(member: Path) -> str:
    srcs = [p for p in (member / "src").iterdir() if (p / "__init__.py").is_file()]
    if len(srcs) != 1:
        raise AssertionError(
            f"{member}: expected one package under src/, found {[p.name for p in srcs]}"
        )
    return srcs[0].name


def structure_problems(member: Path) -> list[str]:
    """What a member lacks from CONTRIBUTING.md's layout (README, tests, src package, registered suite)."""
    problems = []
    if not (member / "README.md").is_file():
        problems.append("no README.md")
    tests = member / "tests"
    if not tests.is_dir() or not list(tests.glob("test_*.py")):
        problems.append("no tests/test_*.py")
    try:
        name = import_name(member)
    except AssertionError as exc:
        return [*problems, str(exc)]
    eps = project(member).get("entry-points", {}).get("neurips25.benchmarks", {})
    if not eps:
        problems.append("no [project.entry-points.'neurips25.benchmarks'] suite")
    for target in eps.values():
        module = target.split(":")[0]
        if module.split(".")[0] != name:
            problems.append(f"suite entry point {target} is outside the package {name}")
        path = member / "src" / (module.replace(".", "/") + ".py")
        if not path.is_file():
            problems.append(f"suite module {module} not found at {path}")
    return problems


def declared_distributions(member: Path, extras: bool = False) -> set[str]:
    """The member's dependencies; with ``extras``, its optional ones (the ``peers`` extra) too."""
    deps = list(project(member).get("dependencies", []))
    if extras:
        for group in project(member).get("optional-dependencies", {}).values():
            deps.extend(group)
    return {Requirement(d).name.lower().replace("_", "-") for d in deps}


def imported_top_modules(member: Path) -> set[str]:
    """Top-level modules imported anywhere in the member's src (absolute imports only)."""
    mods: set[str] = set()
    for f in (member / "src").rglob("*.py"):
        tree = ast.parse(f.read_text(), filename=str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return mods


def undeclared_imports(member: Path) -> dict[str, str]:
    """Imported third-party modules whose distribution is not a declared dependency: {module: dist}."""
    from importlib.metadata import packages_distributions

    own = import_name(member)
    by_module = packages_distributions()
    # A peer from an optional extra may be imported, lazily, inside the code that runs it (which
    # says clearly when it is absent).
    declared = declared_distributions(member, extras=True)
    missing = {}
    for mod in sorted(imported_top_modules(member)):
        if mod == own or mod in sys.stdlib_module_names or mod == "__future__":
            continue
        if mod in by_module:
            dists = {d.lower().replace("_", "-") for d in by_module[mod]}
        else:
            # Not installed (an extra left out of this sync): the distribution is named after the
            # module, or, for a namespace package such as `optimum` (optimum-quanto), starts with it.
            name = mod.lower().replace("_", "-")
            dists = {name} | {d for d in declared if d.startswith(name + "-")}
        if not dists & declared:
            missing[mod] = ", ".join(sorted(dists))
    return missing
