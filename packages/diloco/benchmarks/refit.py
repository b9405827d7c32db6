"""Refit the scaling laws from the runs of a committed results folder with the current fitting code.

The runs (one per training job) are the data; the fits are cheap. This recomputes the independent
and joint power laws, their leave-one-out residuals, γ*(N) and the parametric forms 1–4 from
``quality.json`` without training anything, and writes ``refit.json`` beside it.

Usage:
    uv run python packages/diloco/benchmarks/refit.py packages/diloco/results/full [--starts 256]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def refit(folder: Path, starts: int) -> dict:
    from diloco import scaling

    data = json.loads((folder / "quality.json").read_text())
    runs = [
        r
        for r in data["runs"]
        if r["batch"] == 32 and r["seed"] == 0 and r["sync_every"] == data.get("H", 30)
    ]
    if not runs:
        runs = [r for r in data["runs"] if r["batch"] == 32 and r["seed"] == 0]
    h_main = max(
        {r["sync_every"] for r in runs}, key=lambda h: sum(r["sync_every"] == h for r in runs)
    )
    runs = [r for r in runs if r["sync_every"] == h_main]

    def label(r):
        return (
            "DP"
            if r["algo"] == "dp"
            else ("torchft" if r["algo"] == "torchft" else f"M={r['replicas']}")
        )

    best: dict[tuple[str, int], dict] = {}
    for r in runs:
        key = (label(r), r["hidden"])
        if key[0] != "torchft" and (key not in best or r["val_loss"] < best[key]["val_loss"]):
            best[key] = r
    widths = sorted({h for _, h in best})
    labels = sorted({lab for lab, _ in best}, key=lambda s: (s != "DP", s))
    n_of = {h: best[("DP", h)]["parameters"] for h in widths}
    sizes = [n_of[h] for h in widths]
    out: dict = {"independent": {}, "leave_one_out": {}, "inner_lr": {}, "best": {}}
    for lab in labels:
        ls = [best[(lab, h)]["val_loss"] for h in widths]
        out["best"][lab] = dict(zip(map(str, widths), ls, strict=True))
        out["independent"][lab] = scaling.fit_power_law(sizes, ls)
        out["inner_lr"][lab] = scaling.fit_power_law(
            sizes, [best[(lab, h)]["inner_lr"] for h in widths]
        )
        out["leave_one_out"][lab] = scaling.leave_one_out(sizes, ls)
    jn, jm, jl = [], [], []
    for lab in labels:
        if lab.startswith("M="):
            for h in widths:
                jn.append(n_of[h])
                jm.append(int(lab[2:]))
                jl.append(best[(lab, h)]["val_loss"])
    out["joint"] = scaling.fit_joint_power_law(jn, jm, jl)
    out["joint_leave_one_out"] = scaling.leave_one_out(jn, jl, M=jm)
    out["parametric"] = {}
    for form in (1, 2, 3, 4):
        try:
            r = scaling.fit_parametric(jn, jm, jl, form, n_starts=starts)
            out["parametric"][form] = {
                "params": r["params"],
                "holdout_residual": r["holdout_residual"],
            }
        except (ValueError, RuntimeError) as exc:
            out["parametric"][form] = {"error": str(exc)}
    out["starts"] = starts
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--starts", type=int, default=256)
    args = ap.parse_args(argv)
    out = refit(args.folder, args.starts)
    (args.folder / "refit.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    main()
