"""benchmarks/gpu.py --toy under the interpreter; the sub-corpus builder."""

import importlib.util
from pathlib import Path

from ultradelta.bench import TASKS, task_corpus


def test_gpu_toy():
    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("ultradelta_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--toy"])
    assert len(rows) == 2 and all(r["rel_err"] <= 1e-6 for r in rows)


def test_task_corpora_disjoint():
    corpora = [task_corpus(p) for p in TASKS.values()]
    files = [set(c.train_files) | set(c.val_files) for c in corpora]
    for i in range(len(files)):
        assert files[i] and corpora[i].val.numel() > 1000
        for j in range(i):
            assert not files[i] & files[j]
