"""A reduced stand-in for ``--full``: quick's model and data, more steps, chosen arms, one seed.

``--full`` (3 seeds, 3000 steps, 3-point grids for five arms on both tasks) is hours on two
shared cores. This runs the comparison the paper is about, MeZO against DiZO, for longer than
quick (600 steps = 12 projection rounds by default) at quick's best LR, on both tasks, through
the suite's own runner, and writes the same artefacts (``task_*_runs.json``, plots) plus
``results.json`` with the commit::

    uv run python packages/dizo/benchmarks/longer.py --steps 600 --out packages/dizo/results/longer_600
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import time
from pathlib import Path

from neurips25_core.bench import Context


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--arms", default="mezo,dizo", help="comma-separated arms (lr 1e-3 each)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--tasks", default="a,b")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.steps < 1:
        raise ValueError(f"--steps: expected >= 1, got {args.steps}")
    arms = [a for a in args.arms.split(",") if a]
    if "mezo" not in arms or "dizo" not in arms:
        raise ValueError(f"--arms: expected mezo and dizo among them, got {arms}")
    import dizo.bench as b

    args.out.mkdir(parents=True, exist_ok=True)
    grids = {a: [args.lr] for a in arms}
    results = []
    t0 = time.perf_counter()
    for name in args.tasks.split(","):
        ctx = Context(suite="dizo", case=f"task_{name}_longer", mode="quick", out_dir=args.out)
        base = b._base(ctx)
        if name not in ("a", "b"):
            raise ValueError(f"--tasks: expected a and/or b, got {name!r}")
        task = b.task_a(32, 8) if name == "a" else b.task_b(512, 256)  # quick's sizes
        b._quality(ctx, task, base, grids, args.steps, [0], max(args.steps // 10, 1))
        results += [dataclasses.asdict(r) for r in ctx.results]
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    ).stdout.strip()
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "commit": commit,
                "steps": args.steps,
                "grids": grids,
                "seconds": time.perf_counter() - t0,
                "results": results,
            },
            indent=1,
            default=str,
        )
    )
    print(f"wrote {args.out} (commit {commit})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
