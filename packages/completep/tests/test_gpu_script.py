"""benchmarks/gpu.py runs end to end at toy size on CPU and writes its fits."""

import importlib.util
import json
import math
from pathlib import Path

import pytest


@pytest.mark.slow  # ~15 s on the loaded two cores (corpus load + 8 toy runs)
def test_gpu_script_toy(tmp_path):
    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("completep_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--toy", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "gpu_lr_transfer.json").read_text())
    assert len(saved["runs"]) == 2 * 2 * 2
    assert all(math.isfinite(r["val_bpb"]) and r["val_bpb"] > 0 for r in result["runs"])
    assert set(saved["summary"]) == {"sp", "completep"}
