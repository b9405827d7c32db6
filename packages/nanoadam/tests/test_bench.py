"""The benchmark suite is declared in every mode, and its task code does what it says."""

from __future__ import annotations

import pytest
import torch
from nanoadam.bench import SUITE
from nanoadam.tasks import TASK1, TASK2, PackageSnippets, teacher_student


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert SUITE.name == "nanoadam"
    assert names == {"teacher_student", "forgetting", "step_time"}
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names, mode


def test_teacher_student_masks_and_shift():
    r = teacher_student(0, 200, 200)
    for crit in ("small_weight", "large_grad"):
        assert r[crit]["l2_shift"] > 0
        assert r[crit]["test_loss"] >= 0
        assert r[crit]["pre_test_loss"] == r["small_weight"]["pre_test_loss"]
    assert teacher_student(0, 200, 200) == r  # seeded: the same numbers every run
    # mask_interval is honoured: re-selecting every step is a different run than m = 100
    r1 = teacher_student(0, 200, 200, mask_interval=1)
    assert r1 != r


def test_package_snippets_disjoint_files_and_labels():
    assert not set(TASK1) & set(TASK2)
    data = PackageSnippets(TASK1, 64)
    x, y = data.batch("train", 32, seed=0)
    assert x.shape == (32, 64) and x.dtype == torch.int64 and int(x.max()) < 256
    assert set(y.tolist()) <= set(range(len(TASK1)))
    x2, y2 = data.batch("train", 32, seed=0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    # train and test text come from different files
    for tr, te in zip(data.data["train"], data.data["test"]):
        assert tr.tobytes()[:4096] != te.tobytes()[:4096]


def test_gpu_script_toy(tmp_path):
    """``benchmarks/gpu.py --toy`` (in process, interpreter): correctness passes, rows are timed."""
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("nanoadam_gpu_bench", script)
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    out = tmp_path / "gpu.json"
    assert gpu.main(["--toy", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["correctness"] and all(r["ok"] for r in result["correctness"])
    assert any("triton_vs_ref" in r for r in result["correctness"])
    assert len(result["speed"]) == 4
    for row in result["speed"]:
        assert row["triton_ms"] > 0 and row["adamw_fused_ms"] > 0
        assert row["state_bytes"] < row["adamw_state_bytes"]


def test_forgetting_rejects_unknown_arms(tmp_path):
    from nanoadam.bench import forgetting

    from neurips25_core.bench import Context

    ctx = Context(suite="nanoadam", case="forgetting", mode="smoke", out_dir=tmp_path)
    with pytest.raises(ValueError, match="arms"):
        forgetting(ctx, ("nanoadam", "sgd", "adamw"))
    with pytest.raises(ValueError, match="arms"):
        forgetting(ctx, ("nanoadam",))  # the baseline must run in the same case


@pytest.mark.slow
def test_all_arms_script_smoke(tmp_path):
    """``benchmarks/forgetting_all_arms.py --smoke``: every arm runs and is recorded."""
    import importlib.util
    import json
    from pathlib import Path

    from nanoadam.bench import ARMS_FULL, _peft_available

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "forgetting_all_arms.py"
    spec = importlib.util.spec_from_file_location("nanoadam_all_arms", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--smoke", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "forgetting_runs.json").read_text())
    expected = set(ARMS_FULL) if _peft_available() else set(ARMS_FULL) - {"lora"}
    assert {r["arm"] for r in runs} == expected
    assert all(r["state_bytes"] > 0 and r["relative_l2_shift"] > 0 for r in runs)
