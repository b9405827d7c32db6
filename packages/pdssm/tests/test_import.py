"""Importing pdssm is lean: no triton import, no CUDA initialisation."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_load_triton_or_cuda():
    code = (
        "import sys, torch, pdssm, pdssm.tasks, pdssm.train\n"
        "assert 'triton' not in sys.modules, 'triton imported eagerly'\n"
        "assert not torch.cuda.is_initialized(), 'CUDA initialised on import'\n"
        "assert set(pdssm.__all__) == {'PDSSM', 'PDSSMLayer', 'pd_scan', 'tasks'}\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
