"""All seven forgetting arms at the ``--quick`` sizes (one committed run; CPU, about 1.5 min of CPU).

``neurips25 bench nanoadam --quick`` runs the issue's quick arms (NanoAdam, AdamW, LoRA) and
``--full`` runs all seven on the 0.87M backbone at 400 steps per task (about 6.7 h here). This
script runs the random, large-weight, large-grad and static-mask arms as well, on the quick
backbone and sizes (hidden-64 tiny Llama, 60 steps per task, LR ∈ {3e-4, 3e-3}), so that the
criteria can be compared with one another::

    NEURIPS25_CACHE=$(mktemp -d) uv run python packages/nanoadam/benchmarks/forgetting_all_arms.py \\
        --out packages/nanoadam/results/quick_all_arms
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nanoadam.bench import ARMS_FULL, forgetting

from neurips25_core.bench import Context, write_json, write_markdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench-out/nanoadam-all-arms")
    ap.add_argument("--smoke", action="store_true", help="toy sizes (seconds; for the test)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    mode = "smoke" if args.smoke else "quick"
    ctx = Context(suite="nanoadam", case="forgetting_all_arms", mode=mode, out_dir=out)
    forgetting(ctx, ARMS_FULL)
    write_json(ctx.results, out / "results.json")
    write_markdown(
        ctx.results, out / "results.md", title=f"nanoadam forgetting, all arms, --{mode} sizes"
    )
    print(f"wrote {out}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
