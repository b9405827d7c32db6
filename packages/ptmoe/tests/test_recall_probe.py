"""benchmarks/recall_probe.py: the row formats, the chance level, bad input, and that the probe can
see recall being learned (adjacent format, tiny size) so its negative results mean something."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recall_probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("ptmoe_recall_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fmt", ["adjacent", "separated"])
def test_rows_answer_the_queried_key(probe, fmt):
    keys, values = 7, 11
    first_value = probe.FIRST_KEY + keys
    for seed in range(20):
        ids, labels = probe.make_row(random.Random(seed), fmt, keys, values, (2, 5), 3)
        assert len(ids) == len(labels)
        n = next(
            i
            for i, t in enumerate(ids)
            if t == probe.QUERY or (i % 2 == 0 and i and t in ids[:i:2])
        )
        table = dict(zip(ids[:n:2], ids[1:n:2]))  # the context: key, value pairs
        assert all(probe.FIRST_KEY <= k < first_value for k in table)
        answered = [i for i, lab in enumerate(labels) if lab != -100]
        assert len(answered) == 3
        for i in answered:
            key = ids[i - 1] if fmt == "adjacent" else ids[i - 2]
            assert fmt == "adjacent" or (ids[i - 1] == probe.ANSWER and ids[i - 3] == probe.QUERY)
            assert labels[i] == ids[i] == table[key]


def test_chance(probe):
    assert probe.chance((2, 2)) == 0.5
    assert probe.chance((2, 4)) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"fmt": "gap"}, "fmt"),
        ({"keys": 0}, "keys"),
        ({"steps": 1.5}, "steps"),
        ({"pairs": (3, 2)}, "pairs"),
        ({"keys": 4, "pairs": (2, 5)}, "pairs"),
    ],
)
def test_bad_input_names_the_argument(probe, kwargs, name):
    with pytest.raises(ValueError, match=name):
        probe.run(**kwargs)


def test_adjacent_recall_is_learned(probe, tmp_path):
    """A 2-layer, 64-wide Llama learns adjacent recall (8 keys, 16 values) within 300 steps (~6 CPU s)."""
    out = tmp_path / "probe.json"
    argv = [
        "--format",
        "adjacent",
        "--keys",
        "8",
        "--values",
        "16",
        "--pairs",
        "2",
        "4",
        "--steps",
        "300",
        "--out",
        str(out),
    ]
    assert probe.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["chance"] < 0.4
    assert result["curve"][0][1] < 0.1  # untrained
    assert result["final_accuracy"] > 0.95
    assert result["environment"]["git_commit"]


def test_grid_part_and_report(probe, tmp_path, monkeypatch):
    """--grid runs its part of GRID (shrunk here to two 2-step runs), --report tabulates and plots them."""
    grid = [
        ("a", dict(fmt="adjacent", keys=4, values=4, pairs=(2, 2), steps=2)),
        ("b", dict(fmt="mixed", keys=4, values=4, pairs=(2, 3), steps=2)),
    ]
    monkeypatch.setattr(probe, "GRID", grid)
    for part in ("0/2", "1/2"):
        assert probe.main(["--grid", "--part", part, "--out-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["a.json", "b.json"]
    assert probe.main(["--report", str(tmp_path)]) == 0
    table = (tmp_path / "results.md").read_text()
    assert (
        "| a | adjacent | llama | 4 × 4, 2–2 |" in table
        and "| b | mixed | llama | 4 × 4, 2–3 |" in table
    )
    assert (tmp_path / "curves.png").stat().st_size > 0
    with pytest.raises(ValueError, match="out_dir"):
        probe.report(str(tmp_path / "empty"))


@pytest.mark.slow  # ~8 s CPU quiet: LFM2's convolution runs its PyTorch fallback here
def test_separated_recall_is_learned_with_short_convolutions(probe):
    """LFM2 (a gated short convolution, then attention) learns the separated shape the tiny Llama
    does not: the convolution hands every position its previous token, so one attention layer
    matches the marker's key against each value's key."""
    result = probe.run("separated", "lfm2", 8, 16, (2, 4), steps=400, every=400, log=lambda _: None)
    assert result["arch"] == "lfm2" and result["chance"] < 0.4
    assert result["final_accuracy"] > 0.95
