"""The suite's pieces: cases declared, the analytic cache size, the torch-pruning peer, gpu.py --toy."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from hybridprune.bench import SUITE, _cache_bytes, _decode_step
from hybridprune.peers import torch_pruning_available, torch_pruning_ffn

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_cases():
    assert SUITE.name == "hybridprune"
    names = {c.name for c in SUITE.cases}
    assert names == {"quality", "speed"}
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names


def _state_bytes(cache) -> int:
    seen, total = set(), 0
    stack = [cache]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            total += obj.numel() * obj.element_size()
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("transformers"):
            stack.extend(vars(obj).values())
    return total


def test_cache_bytes_formula_matches_the_real_cache(make_nemotron_h, make_llama):
    for model in (make_nemotron_h(dtype=torch.float32), make_llama(dtype=torch.float32)):
        model.config.use_cache = True
        ids = torch.randint(3, 64, (1, 10))
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        assert _state_bytes(cache) == _cache_bytes(model.config, 10), type(model).__name__
        step = _decode_step(model, 10)
        assert step().shape[:2] == (1, 1)


@pytest.mark.skipif(
    not torch_pruning_available(), reason="torch-pruning (peers extra) not installed"
)
def test_torch_pruning_peer_prunes_ffn_only_and_runs(make_nemotron_h):
    model = make_nemotron_h(dtype=torch.float32)
    ids = torch.randint(3, 64, (1, 12))
    n = sum(p.numel() for p in model.parameters())
    student, info = torch_pruning_ffn(model, ids, int(0.9 * n))
    assert info["full_graph_error"]  # recorded either way
    assert info["params"] == sum(p.numel() for p in student.parameters()) < n
    assert student.config.hidden_size == model.config.hidden_size
    assert sum(p.numel() for p in model.parameters()) == n  # teacher untouched
    with torch.no_grad():
        assert torch.isfinite(student(input_ids=ids).logits).all()


def test_gpu_script_toy(tmp_path):
    # in-process (the script's own main), so the test does not pay a second transformers import
    spec = importlib.util.spec_from_file_location("hybridprune_gpu_bench", SCRIPT)
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    out = tmp_path / "gpu.json"
    assert gpu.main(["--toy", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {r["model"] for r in result["rows"]} == {"8B-shaped", "4B-shaped"}
    assert all(r["decode_tokens_per_s"] > 0 for r in result["rows"])
    assert len(result["ratios"]) == 2 and "torch path" in result["backend"]
