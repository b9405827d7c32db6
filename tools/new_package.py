#!/usr/bin/env python3
"""Scaffold a new per-paper package: ``python tools/new_package.py NAME [--paper TITLE] [--url URL]``.

Creates ``packages/NAME`` with the layout of CONTRIBUTING.md (pyproject with the benchmark entry point,
src layout with reference/ops/bench modules, a README skeleton, a tests folder, a results folder)
and registers the package in the root ``pyproject.toml`` (workspace source + dev group) so that
``uv run pytest`` and ``uv run neurips25 bench`` pick it up. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "# -- workspace members (tools/new_package.py keeps this list) --"
NAME_RE = re.compile(r"^[a-z][a-z0-9]*$")

PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"
description = "{paper} (NeurIPS 2025), part of neurips25."
readme = "README.md"
requires-python = ">=3.11"
license = "MIT"
dependencies = [
    "neurips25-core",
    "torch>=2.5",
    "triton>=3.2; sys_platform == 'linux'",
]

[project.urls]
Paper = "{url}"

[project.entry-points."neurips25.benchmarks"]
{name} = "{name}.bench:SUITE"

[tool.uv.sources]
neurips25-core = {{ workspace = true }}

[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/{name}"]
"""

README = """# {name}

**{paper}** (NeurIPS 2025). Paper: {url}. Official code: (link).

## The idea

(Five lines: what the method does and why it is faster / smaller / better.)

## Install

```bash
uv pip install "git+https://github.com/<org>/neurips25#subdirectory=shared/core" \\
               "git+https://github.com/<org>/neurips25#subdirectory=packages/{name}"
# or, inside a clone of the repository:
uv sync --package {name}
```

## Usage (runs on CPU)

```python
import {name}
```

## API

| name | what |
|---|---|

## Support

| device | float32 | bfloat16 | float64 |
|---|---|---|---|
| CPU (torch) | | | |
| CUDA (Triton) | | | |

## Results

`uv run neurips25 bench {name} --quick --out packages/{name}/results` (date, machine).

## Tests

`uv run --package {name} pytest packages/{name}`
"""

INIT = '''"""{paper} (NeurIPS 2025)."""

__all__: list[str] = []
'''

REFERENCE = '''"""Naive, readable reference implementations of {name}: the spec in code (float64-capable)."""
'''

OPS = '''"""Public ops of {name}: argument checks, autograd functions and backend dispatch."""
'''

BENCH = '''"""The {name} benchmark suite (``neurips25 bench {name}``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache.
"""

from __future__ import annotations

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(name="{name}", paper="{paper}", url="{url}")


@SUITE.case("placeholder_speed", kind="speed")
def placeholder_speed(ctx: Context) -> None:
    """Placeholder: replace with ours vs the baseline and the peer, outputs checked equal first."""
    import torch

    n = ctx.pick(smoke=64, quick=512, full=2048)
    a = torch.randn(n, n)
    with single_thread():
        result = compare(
            {{"torch.mm": lambda: a @ a, "einsum": lambda: torch.einsum("ij,jk->ik", a, a)}},
            baseline="torch.mm",
            min_time=ctx.pick(smoke=0.01, quick=0.2, full=1.0),
        )
    result.record(ctx, n=n)
'''

TEST = '''"""Smoke tests for the {name} scaffold (replace with the package's real tests)."""

import {name}
from {name}.bench import SUITE


def test_public_api_is_declared():
    assert isinstance({name}.__all__, list)


def test_suite_is_named_after_the_package():
    assert SUITE.name == "{name}"
    assert SUITE.cases, "the suite declares at least one case"
'''


def register(pyproject: Path, name: str) -> None:
    """Add ``name`` to the workspace sources and to the dev group of the root pyproject."""
    text = pyproject.read_text()
    if text.count(MARKER) != 2:
        raise SystemExit(f"error: {pyproject} lacks the two '{MARKER}' markers")
    source_line = f"{name} = {{ workspace = true }}"
    dev_line = f'    "{name}",'
    if source_line in text:
        return
    first = text.index(MARKER) + len(MARKER)
    text = text[:first] + "\n" + source_line + text[first:]
    second = text.index(MARKER, first) + len(MARKER)
    text = text[:second] + "\n" + dev_line + text[second:]
    pyproject.write_text(text)


def scaffold(name: str, paper: str, url: str, root: Path = ROOT) -> Path:
    if not NAME_RE.match(name):
        raise SystemExit(f"error: NAME must be lowercase letters and digits, got {name!r}")
    target = root / "packages" / name
    if target.exists():
        raise SystemExit(f"error: {target} already exists")
    fields = {"name": name, "paper": paper, "url": url}
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"src/{name}/__init__.py": INIT,
        f"src/{name}/reference.py": REFERENCE,
        f"src/{name}/ops.py": OPS,
        f"src/{name}/bench.py": BENCH,
        f"src/{name}/kernels/__init__.py": '"""Triton kernels (imported lazily by ops.py)."""\n',
        f"tests/test_{name}_scaffold.py": TEST,
        "results/.gitkeep": "",
        "benchmarks/.gitkeep": "",
    }
    for rel, template in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields) if template else "")
    register(root / "pyproject.toml", name)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the method's short name, e.g. tfla")
    parser.add_argument("--paper", default="(paper title)", help="the paper's title")
    parser.add_argument("--url", default="https://arxiv.org/abs/", help="the paper's address")
    args = parser.parse_args(argv)
    target = scaffold(args.name, args.paper, args.url)
    print(f"created {target.relative_to(ROOT)}; run `uv sync` to install it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
