"""The suite declares its cases in every mode (the workspace smoke test runs them)."""

import pytest
from easyspec.bench import SUITE, _sizes


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "easyspec"
    assert names == {"acceptance", "acceptance_small", "draft_latency", "end_to_end"}
    for mode in ("smoke", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names
    assert {c.name for c in SUITE.cases_for("quick")} == names - {"acceptance_small"}
    for mode in ("smoke", "quick", "small", "full"):
        s = _sizes(mode)
        assert s["draft"][0] >= 4, "the draft needs middle layers to group"


@pytest.mark.slow
def test_gpu_script_toy(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["correctness"] and all(r["ok"] for r in result["correctness"])
    assert {r["backend"] for r in result["speed"]} == {"sequential", "stacked", "exact (N=1)"}
