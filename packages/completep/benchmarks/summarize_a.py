"""Combine A's per-arm results (``arm_*_lr_transfer`` runs.json files) into one table and plot.

Usage::

    uv run python packages/completep/benchmarks/summarize_a.py OUT.png DIR [DIR ...]

Each DIR holds one arm's ``lr_transfer_<kind>_runs.json``. Prints a markdown table per arm (the
validation bits/byte of every run by depth, LR and seed; η* from the mean over seeds and per seed;
the log₂η*-on-log₂L slopes) and draws η*(L) for every arm, with the two seeds' fits as error bars,
beside the best loss per depth.
"""

import json
import math
import pathlib
import statistics
import sys

from neurips25_core.bench import plot_lines


def _fmt(fit: dict) -> str:
    return (
        f"{fit['log2_lr']:.2f}"
        + ("e" if fit.get("edge") else "")
        + ("f" if fit.get("flat") else "")
    )


def main(argv: list[str]) -> None:
    out, dirs = pathlib.Path(argv[0]), [pathlib.Path(d) for d in argv[1:]]
    eta, spread, best = {}, {}, {}
    depths: list[int] = []
    for d in dirs:
        (path,) = d.glob("lr_transfer_*_runs.json")
        data = json.loads(path.read_text())
        for kind, summ in data["summary"].items():
            fits = summ["fits"]
            depths = sorted(int(k) for k in fits)
            print(
                f"\n**{kind}** (steps {data['steps']}, width {data['width']}, batch {data['batch']})\n"
            )
            print(
                "| L | log₂η: bpb seed 0 (seed 1) | η* mean | η* s0 | η* s1 | max seed gap | best bpb |"
            )
            print("|---|---|---:|---:|---:|---:|---:|")
            for depth in depths:
                f = fits[str(depth)]
                cells = []
                for x in f["grid"]:
                    by_seed = {
                        r["seed"]: r["val_bpb"]
                        for r in data["runs"]
                        if r["kind"] == kind and r["depth"] == depth and r["log2_lr"] == x
                    }
                    cell = f"{x}: {by_seed[0]:.3f}"
                    if 1 in by_seed:
                        cell += f" ({by_seed[1]:.3f})"
                    cells.append(cell)
                seeds = f["per_seed"]
                print(
                    f"| {depth} | {'; '.join(cells)} | {_fmt(f)} | "
                    f"{_fmt(seeds['0']) if '0' in seeds else '–'} | "
                    f"{_fmt(seeds['1']) if '1' in seeds else '–'} | "
                    f"{f['max_seed_gap_bpb']:.3f} | {f['best_val_bpb']:.3f} |"
                )
            per_seed = summ.get("slope_per_seed", {})
            print(
                f"\nslope of log₂η* on log₂L: mean over seeds {summ['slope']:+.2f}; "
                + ", ".join(f"seed {s} {v:+.2f}" for s, v in sorted(per_seed.items()))
            )
            eta[kind] = [fits[str(x)]["log2_lr"] for x in depths]
            spread[kind] = [
                statistics.pstdev([fits[str(x)]["per_seed"][s]["log2_lr"] for s in ("0", "1")])
                if all(s in fits[str(x)]["per_seed"] for s in ("0", "1"))
                else math.nan
                for x in depths
            ]
            best[kind] = [fits[str(x)]["best_val_bpb"] for x in depths]
    plot_lines(
        depths,
        eta,
        out,
        xlabel="depth L",
        ylabel="log2 η* (mean over seeds; bars: seeds' spread)",
        title="A: optimal base LR vs depth",
        logx=True,
        errors=spread,
    )
    plot_lines(
        depths,
        best,
        out.with_name(out.stem + "_best_bpb.png"),
        xlabel="depth L",
        ylabel="best validation bits/byte",
        title="A: best loss vs depth",
        logx=True,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
