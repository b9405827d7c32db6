"""The suite declares its cases; the decode-step case runs at smoke size and records every arm."""

from __future__ import annotations

import pytest
from xecomla.bench import SUITE

from neurips25_core.bench import Context


def test_suite_cases():
    assert SUITE.name == "xecomla"
    assert {c.name for c in SUITE.cases} == {"decode_step", "quality", "decode_model"}


@pytest.mark.slow  # ~10 s on a loaded machine; tests/test_smoke.py runs it in CI too
def test_decode_step_smoke(tmp_path):
    case = next(c for c in SUITE.cases if c.name == "decode_step")
    ctx = Context(suite="xecomla", case="decode_step", mode="smoke", out_dir=tmp_path)
    case.fn(ctx)
    impls = {r.params["impl"] for r in ctx.results}
    assert impls == {"gqa", "mla_absorbed", "mla_decompressed", "mamba2_step"}
    assert all(r.value > 0 for r in ctx.results)


@pytest.mark.slow  # a subprocess that imports torch/triton again: ~10 s on a loaded machine
def test_gpu_script_toy(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    out = tmp_path / "gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    proc = subprocess.run(
        [sys.executable, str(script), "--toy", "--models", "--max-batch", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {r["backend"] for r in result["correctness"]} == {"triton", "torch"}
    assert all(r["ok"] for r in result["correctness"])
    assert result["speed"] and result["speed"][0]["triton_ms"] > 0
    rows = result["models"]
    assert {r["arm"] for r in rows} == {"gqa", "mambainllama50", "zebra"}
    # on CPU nothing runs out of memory: the search reaches the cap (3: doubling, then bisection)
    assert all(r["max_batch"] == 3 and r["tokens_per_s"] > 0 for r in rows)
