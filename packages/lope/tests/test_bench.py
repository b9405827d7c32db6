"""The benchmark suite's declaration (tests/test_smoke.py runs every case at smoke size), and the
GPU script at toy size (the Triton interpreter on CPU without a GPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lope.bench import SUITE

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_is_named_after_the_package_and_has_its_cases():
    assert SUITE.name == "lope"
    assert {"quality", "expert_mix_speed", "layer_overhead_speed"} <= {c.name for c in SUITE.cases}


def test_quality_sizes_follow_the_issue():
    from lope.bench import QUALITY_SIZES, noise_rates, size_arms
    from lope.experiment import ARMS

    quick, full = QUALITY_SIZES["quick"], QUALITY_SIZES["full"]
    # --quick: 10 %, hidden 64, LoRA / HydraLoRA / LoPE, 150 steps per stage, one seed.
    assert quick["llama"]["hidden_size"] == 64 and noise_rates(quick) == [0.1]
    assert quick["steps_per_stage"] == 150
    assert [seeds for _, seeds, _ in quick["runs"]] == [(0,)]
    assert {"lora_r4", "hydralora", "lope"} <= set(size_arms(quick))
    assert full["llama"] == dict(hidden_size=96, num_layers=4, num_heads=4, intermediate_size=256)
    assert (full["n_train"], full["n_test"]) == (4000, 1000)
    assert noise_rates(full) == [0.05, 0.1, 0.2, 0.3]
    assert full["batch_size"] == 16 and full["epochs"] == 2 and full["lrs"] == (5e-4, 2e-3)
    assert full["steps_per_stage"] is None and size_arms(full) == list(ARMS)
    # The headline arms run at every rate with at least 2 seeds (a CI), 3 at 10 %.
    for rate in noise_rates(full):
        for arm in ("lora_r4", "hydralora", "lope"):
            seeds = {s for r, ss, arms in full["runs"] if r == rate and arm in arms for s in ss}
            assert len(seeds) >= (3 if rate == 0.1 else 2), (rate, arm)
    smoke = QUALITY_SIZES["smoke"]
    assert smoke["llama"]["num_layers"] == 1 and smoke["n_train"] == 200
    assert {"lora_r4", "hydralora", "lope"} <= set(size_arms(smoke))


@pytest.mark.slow  # ~20 s of CPU: a transformers import, the interpreter, a toy Llama step
def test_gpu_script_toy(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--toy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    checks = result["correctness"]
    assert {(r["variant"], r["dtype"]) for r in checks} == {
        (v, d) for v in ("triton", "torch", "loop") for d in ("float32", "bfloat16")
    }
    assert all(r["ok"] for r in checks)
    assert all(r["out_err"] <= 1e-5 for r in checks if r["dtype"] == "float32")
    row = result["speed"][0]
    assert all(row[f"{v}_fwd_bwd_ms"] > 0 for v in ("triton", "torch", "loop"))
    steps = {r["arm"]: r for r in result["model_step"]}
    assert steps["lope"]["step_ms"] > 0 and steps["lope"]["loss"] > 0
    assert "step_ms" in steps["peft_lora"] or steps["peft_lora"]["skipped"]


def test_cost_model_counts_the_spec_terms():
    from lope.bench import layer_flops

    lora = layer_flops(T=10, d_in=6, d_out=5, rank=2, experts=1, compensate=False)
    assert lora == {"base": 600, "adapter": 2 * 10 * 2 * (6 + 5), "router": 0, "compensation": 0}
    lope = layer_flops(T=10, d_in=6, d_out=5, rank=2, experts=4, compensate=True)
    assert lope["adapter"] == 2 * 10 * 2 * (6 + 4 * 5) and lope["router"] == 2 * 10 * 6 * 4
    assert lope["compensation"] == 2 * 10 * 4 * 2 * 5 + 3 * 10 * 4 * 5
