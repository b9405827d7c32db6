"""The suite is declared with every case in every mode; the task data is real and balanced."""

from __future__ import annotations

import pytest
import torch
from dizo.bench import SUITE
from dizo.tasks import snippet_task


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "dizo"
    assert names == {"task_b_classification", "step_time", "peak_memory"}
    for mode in ("smoke", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names
    # quick leaves out the fresh-process memory case (five transformers imports)
    assert {c.name for c in SUITE.cases_for("quick")} == names - {"peak_memory"}


def test_snippet_task_shapes_and_balance():
    (x, y), (xe, ye) = snippet_task(32, 20, seed=0)
    assert x.shape == (32, 66) and xe.shape == (20, 66)
    assert int(y.sum()) == 16 and int(ye.sum()) == 10
    assert torch.all(x[:, -1] == ord("#")) and x.max() < 256


@pytest.mark.slow
def test_gpu_script_toy(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    pytest.importorskip("triton")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    out = tmp_path / "gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    proc = subprocess.run(
        [sys.executable, str(script), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["correctness"]["ok"]
    assert {r["arm"] for r in res["models"]} == {"fo_adamw", "mezo_torch", "mezo_triton", "dizo"}
