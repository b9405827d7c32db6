"""The benchmark suite's pieces and the GPU script (at toy size, Triton through the interpreter)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from sinkgd.bench import SUITE, _meta_state_bytes, make_optimizer, muon_available, tokens_to_target

GPU_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_declares_quality_memory_and_speed():
    assert SUITE.name == "sinkgd"
    assert {c.name: c.kind for c in SUITE.cases} == {
        "quality": "quality",
        "memory": "speed",
        "speed": "speed",
    }
    assert all(set(c.modes) == {"quick", "full"} for c in SUITE.cases)


def test_tokens_to_target_interpolates():
    curve = [(100, 3.0), (200, 2.0), (300, 1.5)]
    assert tokens_to_target(curve, 2.5) == pytest.approx(150.0)
    assert tokens_to_target(curve, 3.5) == 100.0
    assert tokens_to_target(curve, 1.0) is None


@pytest.mark.parametrize("name", ["sinkgd", "swan", "adamw", "sgd", "muon"])
def test_benchmark_optimizers_train_with_an_lr_schedule(name):
    if name == "muon" and not muon_available():
        pytest.skip("torch.optim.Muon is absent in this torch")
    from neurips25_core.models import tiny_llama, tiny_llama_config, train

    model = tiny_llama(
        tiny_llama_config(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=48)
    )
    opt = make_optimizer(name, model, 1e-3)
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    before = [p.detach().clone() for p in model.parameters()]
    result = train(model, lambda step: (x, x), 3, optimizer=opt, progress=False)
    assert len(result.losses) == 3 and all(math.isfinite(v) for v in result.losses)
    assert result.lrs[2] < result.lrs[0]  # the cosine schedule reached the optimizer's groups
    changed = [not torch.equal(b, p) for b, p in zip(before, model.parameters())]
    assert all(changed)


def test_meta_state_bytes_on_a_galore_like_shape():
    from neurips25_core.models import tiny_llama_config

    cfg = tiny_llama_config(
        hidden_size=64, intermediate_size=176, num_heads=4, num_layers=2, vocab_size=1000
    )
    params, adam = _meta_state_bytes(cfg, "adamw")
    _, sink = _meta_state_bytes(cfg, "sinkgd")
    _, sgd = _meta_state_bytes(cfg, "sgd")
    assert adam == 8 * params
    matrix = 2 * (4 * 64 * 64 + 3 * 64 * 176)
    assert sink == 8 * (params - matrix)
    assert sgd == 0


def test_gpu_script_runs_at_toy_size(tmp_path):
    spec = importlib.util.spec_from_file_location("sinkgd_gpu_script", GPU_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gpu.json"
    results = module.main(["--toy", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["toy"] is True and saved["correctness"]
    for row in results["correctness"]:
        tol = 1e-5 if row["dtype"] == "float32" else 1.6e-2
        assert row["triton_vs_torch"] <= tol, row
        assert row["triton_vs_fp64"] <= tol, row
    names = {r["optimizer"] for r in results["step_speed"]}
    assert {"SinkGD L=5 triton", "SWAN"} <= names
