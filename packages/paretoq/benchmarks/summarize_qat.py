"""Print the README's QAT tables from the benchmark's ``qat_runs_*.jsonl`` files.

    python packages/paretoq/benchmarks/summarize_qat.py packages/paretoq/results/full/qat_runs_full.jsonl \
        packages/paretoq/results/full_fp_baseline/qat_runs_full.jsonl
"""

from __future__ import annotations

import json
import sys


def _label(bits) -> str:
    return "FP" if bits == 16 else ("1.58" if bits == 1.58 else str(int(bits)))


def main(paths: list[str]) -> None:
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    widths = sorted({r["width"] for r in rows}, reverse=True)
    for width in widths:
        mine = [r for r in rows if r["width"] == width]
        pre = next((r for r in mine if r.get("bits") == "fp_pretrained"), None)
        print(
            f"\nwidth {width}"
            + (
                f" ({pre['params'] / 1e6:.2f}M parameters, pretrained FP {pre['bpb']:.4f} bits/byte)"
                if pre
                else ""
            )
        )
        print("| bits | recipe | size (MB) | PTQ bpb | QAT bpb | ‖ΔW‖/‖W‖ | codes flipped |")
        print("|---|---|---|---|---|---|---|")
        for r in mine:
            if r.get("bits") == "fp_pretrained":
                continue
            recipe = f"{r['steps']} steps @ {r['lr']:g}"
            size = r["arith_size_bits"] / 8e6
            ptq = "—" if r["bits"] == 16 else f"{r['ptq_bpb']:.4f}"
            flipped = f"{r['codes_flipped']:.3f}" if "codes_flipped" in r else "—"
            print(
                f"| {_label(r['bits'])} | {recipe} | {size:.3f} | {ptq} | {r['qat_bpb']:.4f} | {r['weight_change']:.3f} | {flipped} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
