"""The ``neurips25`` command: ``list``, ``bench``, ``report``.

    neurips25 list                                   # every installed suite, its paper and cases
    neurips25 bench [NAME ...] [--smoke | --quick | --full] [--out DIR] [--case SUBSTRING] [--kind speed|quality]
    neurips25 report [--root DIR] [--out FILE]       # the committed packages/*/results/ as one page

Suites are discovered through the ``neurips25.benchmarks`` entry-point group. ``bench`` runs the
selected suites with a progress bar, prints one table (case, ours, baseline, ratio, unit) and writes
``results.json``, ``results.md`` and ``ratios.png`` (plus whatever plots the cases write) to
``DIR`` for a single suite, or to ``DIR/<suite>/`` for several. An unknown name exits with status 2
listing the known suites; a case that raises is reported, the other cases and suites still run, and
the exit status is 1.

``--smoke`` runs every case at a toy size (seconds each): what the workspace tests run on an empty
checkpoint cache. Results written into a package's ``results/`` folder from a tree with uncommitted
changes get a warning on stderr, and their markdown says "uncommitted changes".
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path

from neurips25_core.bench import (
    BenchResult,
    Case,
    Suite,
    git_state,
    load_json,
    markdown_table,
    plot_bars,
    write_json,
    write_markdown,
)

__all__ = ["discover_suites", "main", "run_case"]

GROUP = "neurips25.benchmarks"


def discover_suites() -> dict[str, Suite | Exception]:
    """Installed suites by entry-point name; a suite that fails to load maps to its exception."""
    suites: dict[str, Suite | Exception] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            suite = ep.load()
            if not isinstance(suite, Suite):
                raise TypeError(
                    f"entry point {ep.value} is a {type(suite).__name__}, not a neurips25_core.bench.Suite"
                )
            suites[ep.name] = suite
        except Exception as exc:
            suites[ep.name] = exc
    return suites


def _cmd_list(args: argparse.Namespace) -> int:
    suites = discover_suites()
    for name, suite in suites.items():
        if isinstance(suite, Exception):
            print(f"{name:12s}  (failed to load: {type(suite).__name__}: {suite})")
            continue
        kinds = {k: sum(c.kind == k for c in suite.cases) for k in ("speed", "quality")}
        print(f"{name:12s}  {suite.paper}")
        if suite.url:
            print(f"{'':12s}  {suite.url}")
        print(
            f"{'':12s}  {len(suite.cases)} cases ({kinds['speed']} speed, {kinds['quality']} quality): "
            + ", ".join(f"{c.name}[{'/'.join(c.modes)}]" for c in suite.cases)
        )
    return 0 if not any(isinstance(s, Exception) for s in suites.values()) else 1


def _ratio_plot(results: list[BenchResult], path: Path, title: str) -> Path | None:
    with_ratio = [r for r in results if r.ratio is not None]
    if not with_ratio:
        return None
    return plot_bars(
        [r.label for r in with_ratio],
        {"ours vs baseline (>1: ours better)": [r.ratio for r in with_ratio]},
        path,
        ylabel="ratio (log scale)",
        title=title,
        logy=True,
    )


def run_case(
    suite: Suite,
    case: Case,
    mode: str,
    out_dir: Path,
    log=print,
) -> list[BenchResult]:
    """Run one case and write its ``results.json`` / ``results.md`` into ``out_dir``.

    What the workspace smoke test calls for every case of every suite; the CLI writes the same
    files per suite after all of its cases ran.
    """
    results = case.run(suite.name, mode, Path(out_dir), log=log)
    write_json(results, Path(out_dir) / "results.json")
    write_markdown(
        results, Path(out_dir) / "results.md", title=f"{suite.name}/{case.name} --{mode}"
    )
    return results


def _warn_if_dirty_results(out: Path) -> None:
    """A results folder of a package from a tree with uncommitted changes: say it, loudly."""
    resolved = out.resolve()
    if "results" not in resolved.parts:
        return
    commit, clean = git_state(Path.cwd())
    if clean is False:
        print(
            f"warning: writing results into {out} from a tree with uncommitted changes "
            f"(HEAD {commit}); the markdown will say so. Commit first, then re-run, before "
            "quoting these numbers in a README.",
            file=sys.stderr,
        )


def _cmd_bench(args: argparse.Namespace) -> int:
    from neurips25_core.bench import pinned_provenance

    # The tree's state is taken once, before the run writes anything: results written into a
    # tracked results/ folder must not make the later cases of the same run look dirty.
    with pinned_provenance():
        return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    from neurips25_core.progress import progress_bar

    suites = discover_suites()
    known = sorted(suites)
    names = args.names or known
    unknown = [n for n in names if n not in suites]
    if unknown:
        print(
            f"error: unknown suite(s) {', '.join(unknown)}; known suites: {', '.join(known)}",
            file=sys.stderr,
        )
        return 2
    mode = "full" if args.full else "smoke" if args.smoke else "quick"
    out = Path(args.out)
    _warn_if_dirty_results(out)
    failures: list[str] = []
    all_results: list[BenchResult] = []
    plan: list[tuple[str, Suite, object]] = []
    for name in names:
        suite = suites[name]
        if isinstance(suite, Exception):
            failures.append(f"{name}: failed to load: {type(suite).__name__}: {suite}")
            continue
        for case in suite.cases_for(mode):
            if args.case and not any(
                fnmatch.fnmatch(case.name, p) or p in case.name for p in args.case
            ):
                continue
            if args.kind and case.kind != args.kind:
                continue
            plan.append((name, suite, case))
    per_suite: dict[str, list[BenchResult]] = {}
    bar = progress_bar(
        plan,
        desc=f"neurips25 bench ({mode})",
        unit="case",
        enabled=not args.no_progress,
    )
    write = bar.write if hasattr(bar, "write") else print
    for name, suite, case in bar:
        bar.set_postfix_str(f"{name}/{case.name}")
        suite_dir = out if len(names) == 1 else out / name
        start = time.perf_counter()
        try:
            results = case.run(suite.name, mode, suite_dir, log=write)
        except Exception:
            failures.append(f"{name}/{case.name}: raised\n{traceback.format_exc()}")
            write(f"[{name}/{case.name}] FAILED after {time.perf_counter() - start:.1f}s")
            continue
        write(f"[{name}/{case.name}] {len(results)} results in {time.perf_counter() - start:.1f}s")
        per_suite.setdefault(name, []).extend(results)
        all_results.extend(results)
    for name, results in per_suite.items():
        suite_dir = out if len(names) == 1 else out / name
        write_json(results, suite_dir / "results.json")
        write_markdown(results, suite_dir / "results.md", title=f"neurips25 bench {name} --{mode}")
        _ratio_plot(results, suite_dir / "ratios.png", f"{name}: ours vs baseline, same run")
    if len(per_suite) > 1:
        write_json(all_results, out / "results.json")
        write_markdown(all_results, out / "results.md", title=f"neurips25 bench --{mode}")
    print()
    print(markdown_table(all_results) if all_results else "(no results)")
    if all_results:
        print(f"wrote {out}/")
    for f in failures:
        print(f"FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


def _find_root(start: Path) -> Path:
    for p in [start, *start.parents]:
        if (p / "packages").is_dir() and (p / "pyproject.toml").is_file():
            return p
    return start


def _cmd_report(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else _find_root(Path.cwd())
    files = sorted(root.glob("packages/*/results/**/results.json"))
    if not files:
        print(f"error: no packages/*/results/**/results.json under {root}", file=sys.stderr)
        return 1
    parts = [
        "# neurips25 results\n",
        "Gathered from the committed `packages/*/results/` by `neurips25 report`.\n",
    ]
    for f in files:
        results = load_json(f)
        rel = f.relative_to(root)
        stamp = (
            f" ({results[0].date}, {results[0].machine}, commit {results[0].git_commit})"
            if results
            else ""
        )
        parts.append(f"## {rel.parts[1]} — `{rel.parent}`{stamp}\n")
        parts.append(markdown_table(results))
    text = "\n".join(parts)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({len(files)} result files)")
    else:
        print(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neurips25", description="NeurIPS 2025 efficient-ML methods: benchmarks and reports."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the installed benchmark suites")
    bench = sub.add_parser("bench", help="run benchmark suites")
    bench.add_argument(
        "names", nargs="*", metavar="NAME", help="suites to run (default: all installed)"
    )
    group = bench.add_mutually_exclusive_group()
    group.add_argument(
        "--smoke",
        action="store_true",
        help="every case at a toy size (seconds each; what the workspace tests run)",
    )
    group.add_argument(
        "--quick",
        action="store_true",
        help="the quick cases (default; < 60 s per package on 2 CPU cores)",
    )
    group.add_argument("--full", action="store_true", help="the full, documented reproduction")
    bench.add_argument("--out", default="bench-out", help="output directory (default: bench-out)")
    bench.add_argument(
        "--case", action="append", help="only cases whose name contains / matches this (repeatable)"
    )
    bench.add_argument("--kind", choices=["speed", "quality"], help="only cases of this kind")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    report = sub.add_parser("report", help="gather packages/*/results/ into one markdown page")
    report.add_argument(
        "--root", help="repository root (default: found from the current directory)"
    )
    report.add_argument("--out", help="write the page here instead of printing it")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"list": _cmd_list, "bench": _cmd_bench, "report": _cmd_report}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
