"""The benchmark suite is declared; the torchlogix peer agrees with ours; the GPU script runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dlgn import LogicNet, pack_bits, packed_forward
from dlgn.bench import (
    SUITE,
    _copy_into_peer,
    import_torchlogix_layers,
    torchlogix_circuit,
    torchlogix_net,
)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def test_suite_cases():
    names = {c.name for c in SUITE.cases}
    assert names == {"digits_gap", "xor_gap", "train_step_speed", "eval_speed"}
    for mode in ("smoke", "quick", "full"):
        assert {c.name for c in SUITE.cases_for(mode)} == names


def test_torchlogix_peer_equals_ours():
    if import_torchlogix_layers() is None:
        pytest.skip(
            "torchlogix (peers extra) not installed: `uv pip install --no-deps torchlogix==0.2.2`"
        )
    torch.manual_seed(0)
    ours = LogicNet.from_widths(24, [40, 30], num_classes=3, tau=5.0)
    for layer in ours.logic_layers:
        layer.weight.data.mul_(3)
    peer = torchlogix_net(24, [40, 30], 3, 5.0)
    _copy_into_peer(ours, peer)
    x = torch.rand(9, 24)
    with torch.no_grad():
        torch.testing.assert_close(peer.train()(x), ours.train()(x), rtol=1e-5, atol=1e-6)
        xb = x.round()
        eval_out = peer.eval()(xb)
        assert torch.equal(eval_out, ours.eval()(xb))
    # Its raw LUT ids use difflogic's numbering (= ours): the packed circuit reproduces it.
    counts = packed_forward(torchlogix_circuit(peer, 24), pack_bits(xb))
    assert torch.equal(counts.double(), (eval_out.double() * 5.0).round())


@pytest.mark.slow
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
    assert result["correctness"] and all(r["ok"] for r in result["correctness"])
    assert result["speed"] and all(r["triton_ms"] > 0 for r in result["speed"])
    assert result["time_to_target"]
