"""benchmarks/gpu.py runs at toy size (on CPU here) and its batched path matches numpy."""

import importlib.util
from pathlib import Path

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_gpu_script_toy_mode(tmp_path):
    spec = importlib.util.spec_from_file_location("lrannealing_gpu_bench", GPU)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--toy", "--out", str(tmp_path / "gpu.json")])
    assert (tmp_path / "gpu.json").stat().st_size > 10
    for r in results:
        tol = 1e-12 if r["dtype"] == "torch.float64" else 1e-5
        assert r["max_rel_error_vs_numpy_fp64"] < tol, r
        assert r["schedules_per_s"] > 0
